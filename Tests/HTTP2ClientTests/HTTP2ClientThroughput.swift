import Foundation
import HTTP2Client
import Testing

/// Requests a second through the client against nghttpd, beside h2load against the same server in
/// the same run. Only with HTTP2_BENCH=1 (a release build is what counts):
///   swift build -c release --build-tests && HTTP2_BENCH=1 swift test -c release --skip-build --filter HTTP2ClientThroughput
/// HTTP2_BENCH_REQUESTS (100000), HTTP2_BENCH_RUNS (3).
@Suite(.enabled(if: ProcessInfo.processInfo.environment["HTTP2_BENCH"] == "1", "HTTP2_BENCH=1 runs the throughput measurement"))
struct HTTP2ClientThroughput {
    static let environment = ProcessInfo.processInfo.environment
    static let requests = Int(environment["HTTP2_BENCH_REQUESTS"] ?? "") ?? 100_000
    static let runs = Int(environment["HTTP2_BENCH_RUNS"] ?? "") ?? 3
    /// A push-sized body.
    static let body = Array(#"{"aps":{"alert":{"title":"Your order shipped","body":"Order 12345 is on its way"},"badge":3},"type":"orders","event":"order_shipped","orderId":"12345","notificationId":"67890"}"#.utf8)

    @Test func clientBesideH2load() async throws {
        let certificates = try TestCertificates.make()
        defer { certificates.remove() }
        // A sink that cannot be the bottleneck: a 2-byte file answered to every POST (with
        // --echo-upload, nghttpd creates a file per upload and is the bottleneck for both).
        let htdocs = certificates.directory + "/htdocs"
        try FileManager.default.createDirectory(atPath: htdocs, withIntermediateDirectories: true)
        try Data("{}".utf8).write(to: URL(fileURLWithPath: htdocs + "/device"))
        let server = try NGHTTPServer.start(certificates: certificates, htdocs: htdocs, echoUpload: false)
        defer { server.stop() }
        let bodyFile = certificates.directory + "/body.json"
        try Data(Self.body).write(to: URL(fileURLWithPath: bodyFile))

        var ours: [Double] = []
        var theirs: [Double] = []
        for _ in 0..<Self.runs {
            ours.append(try await Self.client(server: server, caFile: certificates.caFile))
            theirs.append(try Self.h2load(server: server, bodyFile: bodyFile))
        }
        let median = { (values: [Double]) in values.sorted()[values.count / 2] }
        print(
            """
            HTTP2Client vs h2load, \(Self.requests) POSTs of \(Self.body.count) bytes, nghttpd (1 worker), 2 connections, \(Self.runs) runs
              HTTP2Client: \(ours.map { Int($0) }) requests/s, median \(Int(median(ours)))
              h2load:      \(theirs.map { Int($0) }) requests/s, median \(Int(median(theirs)))
              ratio: \(String(format: "%.2f", median(ours) / median(theirs)))
            """)
        #expect(median(ours) > 0 && median(theirs) > 0)
    }

    /// Four callers, each handing over batches of 1,000 (the fan-out's shape), over 2 connections.
    static func client(server: NGHTTPServer, caFile: String) async throws -> Double {
        let maxTransfers = Int(environment["HTTP2_BENCH_MAX_TRANSFERS"] ?? "")
        let client = try HTTP2Client(configuration: .init(caFile: caFile, maxTransfers: maxTransfers))
        defer { client.shutdown() }
        let url = server.url("/device")
        let request = HTTP2Request(
            method: "POST", url: url,
            headers: [(name: "apns-topic", value: "eu.wristler.app"), (name: "apns-push-type", value: "alert"), (name: "apns-priority", value: "10")],
            body: body, timeout: .seconds(30))
        // Warm: the connections are open before timing.
        _ = await client.send(Array(repeating: request, count: 100))
        let callers = 4
        let batch = 1000
        let perCaller = requests / callers
        let started = ContinuousClock.now
        let failures = await withTaskGroup(of: Int.self) { group in
            for _ in 0..<callers {
                group.addTask {
                    var failed = 0
                    var sent = 0
                    while sent < perCaller {
                        let count = min(batch, perCaller - sent)
                        let results = await client.send(Array(repeating: request, count: count))
                        failed += results.filter { (try? $0.get().status) != 200 }.count
                        sent += count
                    }
                    return failed
                }
            }
            return await group.reduce(0, +)
        }
        let elapsed = ContinuousClock.now - started
        #expect(failures == 0)
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        return Double(perCaller * callers) / seconds
    }

    /// h2load with the same shape: 2 connections, 100 streams each (nghttpd's limit), same body.
    static func h2load(server: NGHTTPServer, bodyFile: String) throws -> Double {
        let output = try runTool(
            "h2load",
            [
                "-n", String(requests), "-c", "2", "-m", "100", "-d", bodyFile, "-H", "apns-topic: eu.wristler.app",
                server.url("/device"),
            ])
        // "finished in 1.23s, 81234.56 req/s, ..."
        guard let line = output.split(separator: "\n").first(where: { $0.hasPrefix("finished in") }),
            let field = line.split(separator: ",").dropFirst().first,
            let value = Double(field.trimmingCharacters(in: .whitespaces).split(separator: " ").first ?? "")
        else { throw TestSetupError("cannot read h2load's output: \(output)") }
        guard output.contains("succeeded, 0 errored") || output.contains("0 failed") else {
            throw TestSetupError("h2load had failures: \(output)")
        }
        return value
    }
}
