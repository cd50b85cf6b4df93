import EventLog
import Fanout
import Foundation
import HTTP2Client
import Lifecycle
import PostgresClient
import Projections
import PushProtocol

/// The push fan-out end to end: notifications already in the outbox, decided, claimed, rendered in
/// each device's language, sent over TLS HTTP/2 and recorded, against Debian's `nghttpd` as both
/// APNs and FCM (a server that cannot be the bottleneck: static answers). Beside it, in the same
/// run and against the same server: the HTTP/2 client alone sending as many requests (no
/// database), and `h2load` (Debian's `nghttp2-client`), the best any client gets from that server.
struct FanoutBenchmark: Benchmark {
    var rounds: Int
    var scale: Double

    static let notifications = 100_000
    static let people = 20_000
    /// One person in `twoDevicesEvery` has a second phone.
    static let twoDevicesEvery = 10

    func run(on database: BenchmarkDatabase) async throws -> BenchmarkResult {
        for tool in ["/usr/sbin/nghttpd", "/usr/bin/h2load"] where !FileManager.default.isExecutableFile(atPath: tool) {
            throw BenchmarkFailure(description: "\(tool) is missing (apt-get install nghttp2-server nghttp2-client; make bench installs them)")
        }
        let notifications = max(100, Int(Double(Self.notifications) * scale))
        let people = max(10, Int(Double(Self.people) * scale))
        let client = database.client
        try await InboxProjections.prepareLiveTables(client: client)
        progress("registering devices of \(people) people (half iOS, half Android, in en, nl, de and fr)")
        try await client.withConnection { connection in
            _ = try connection.execute(
            """
            INSERT INTO devices (person_id, platform, push_token, app_id, locale, apns_environment, created_at)
            SELECT 'p' || g, CASE WHEN g % 2 = 0 THEN 'ios' ELSE 'android' END,
                CASE WHEN g % 2 = 0 THEN 'c' || lpad(to_hex(g), 63, '0') ELSE 'fcm-' || g END,
                'eu.wristler.app', (ARRAY['en', 'nl-NL', 'de_DE', 'fr-BE'])[g % 4 + 1], 'production', now() - interval '1 day'
            FROM generate_series(0, \(people - 1)) AS g;
            INSERT INTO devices (person_id, platform, push_token, app_id, locale, created_at)
            SELECT 'p' || g, 'android', 'fcm-second-' || g, 'eu.wristler.app', 'nl', now() - interval '1 day'
            FROM generate_series(0, \(people - 1), \(Self.twoDevicesEvery)) AS g;
            INSERT INTO bell_counters (person_id, unread_count, total_count) SELECT 'p' || g, g % 7, g % 7 FROM generate_series(0, \(people - 1)) AS g;
            ANALYZE; CHECKPOINT;
            """)
        }
        let iosTokens = try await client.withConnection { connection in
            try connection.query("SELECT push_token FROM devices WHERE platform = 'ios'").map { try $0.decode(String.self, at: 0) }
        }
        let server = try NGHTTPSink(iosTokens: iosTokens)
        defer { server.stop() }
        // Where the time goes, by process: CPU seconds hardly move with the machine's other load.
        let postmaster = try await client.withConnection { connection in
            ProcessCPU.parent(of: Int32(try connection.query("SELECT pg_backend_pid()").scalar(Int.self)))
        }
        let nghttpd = server.process.processIdentifier
        @Sendable func cpu() -> [String: Double] {
            var seconds = ["fan-out process": ProcessCPU.seconds(of: getpid()), "nghttpd": ProcessCPU.seconds(of: nghttpd)]
            if let postmaster { seconds["PostgreSQL"] = ProcessCPU.seconds(of: postmaster, children: true) }
            return seconds
        }
        @Sendable func perEvent(_ before: [String: Double], _ events: Int) -> [String: Double] {
            let perEvent = cpu().reduce(into: [String: Double]()) { result, process in
                result[process.key] = ((process.value - (before[process.key] ?? 0)) * 1_000_000 / Double(max(1, events))).rounded()
            }
            progress("  CPU per push: " + perEvent.sorted { $0.key < $1.key }.map { "\($0.key) \(Int($0.value)) µs" }.joined(separator: ", "))
            return perEvent
        }
        let pushesPerRound = notifications + (notifications + Self.twoDevicesEvery - 1) / Self.twoDevicesEvery
        progress("nghttpd on 127.0.0.1:\(server.port); \(notifications) notifications (\(pushesPerRound) pushes) per round")

        func fanOut(workers: Int, batch: Int) -> @Sendable (Int) async throws -> Measurement {
            { round in
                try await Self.fillOutbox(client, notifications: notifications, people: people, round: round, workers: workers, batch: batch)
                let transport = try server.transport()
                let sender = FanoutSender(
                    configuration: client.configuration.connection,
                    store: FanoutStore(settings: FanoutStore.Settings(claimFor: .seconds(120))), transport: transport,
                    options: FanoutSender.Options(batchSize: batch, workers: workers, pollInterval: .milliseconds(50), node: "bench"),
                    logger: .silent)
                let sentBefore = try await Self.sent(client)
                let cpuBefore = cpu()
                let started = ContinuousClock.now
                let task = Task { try await sender.run() }
                // Done when every push is counted sent: a read of a table of a few rows, so that
                // watching costs the database nothing beside the fan-out (counting the deliveries
                // every few milliseconds took a good part of a core).
                let deadline = ContinuousClock.now + .seconds(600)
                while try await Self.sent(client) - sentBefore < pushesPerRound {
                    guard ContinuousClock.now < deadline else { throw BenchmarkFailure(description: "the fan-out did not finish in 10 minutes") }
                    try await Task.sleep(for: .milliseconds(20))
                }
                let elapsed = ContinuousClock.now - started
                task.cancel()
                _ = await task.result
                let sent = try await Self.sent(client) - sentBefore
                guard sent == pushesPerRound else {
                    let counters = try await client.withConnection { try FanoutStore.status(on: $0) }.counters
                    throw BenchmarkFailure(description: "the fan-out sent \(sent) of \(pushesPerRound) pushes: \(counters)")
                }
                var measurement = Measurement(round: round, events: sent, elapsed: elapsed)
                measurement.cpuMicrosecondsPerEvent = perEvent(cpuBefore, sent)
                return measurement
            }
        }

        let cases = [
            BenchmarkCase(
                id: "fanout-2x500", title: "fan-out end to end, 2 workers x 500", description:
                    "Outbox rows decided, claimed, rendered per device language, sent to nghttpd over TLS HTTP/2 and recorded: pushes/s.",
                kind: .client, batchSize: 500, appenders: 2, eventsPerRound: pushesPerRound, run: fanOut(workers: 2, batch: 500)),
            BenchmarkCase(
                id: "fanout-4x500", title: "fan-out end to end, 4 workers x 500 (the default)", description:
                    "The same with 4 sending loops claiming 500 each, as `inbox fanout` runs by default.",
                kind: .client, batchSize: 500, appenders: 4, eventsPerRound: pushesPerRound, run: fanOut(workers: 4, batch: 500)),
            BenchmarkCase(
                id: "fanout-4x1000", title: "fan-out end to end, 4 workers x 1,000", description: "The same with 4 sending loops claiming 1,000 each.",
                kind: .client, batchSize: 1000, appenders: 4, eventsPerRound: pushesPerRound, run: fanOut(workers: 4, batch: 1000)),
            BenchmarkCase(
                id: "http2-client", title: "HTTP2Client alone, same requests", description:
                    "The fan-out's HTTP/2 client sending as many FCM-shaped requests in batches of 1,000, without the database.",
                kind: .client, batchSize: 1000, appenders: 1, eventsPerRound: pushesPerRound
            ) { round in
                let cpuBefore = cpu()
                let measured = try await server.clientOnly(requests: pushesPerRound)
                var measurement = Measurement(round: round, events: pushesPerRound, elapsed: measured)
                measurement.cpuMicrosecondsPerEvent = perEvent(cpuBefore, pushesPerRound)
                return measurement
            },
            BenchmarkCase(
                id: "http2-client-libcurl", title: "HTTP2Client alone on its libcurl engine", description:
                    "The same with Configuration.engine = .libcurl (libcurl 7.88's multi interface, the engine before libnghttp2).",
                kind: .client, batchSize: 1000, appenders: 1, eventsPerRound: pushesPerRound
            ) { round in
                let measured = try await server.clientOnly(requests: pushesPerRound, engine: .libcurl)
                return Measurement(round: round, events: pushesPerRound, elapsed: measured)
            },
            BenchmarkCase(
                id: "h2load", title: "h2load, same requests and server", description:
                    "h2load -c 2 -m 100 posting the same number of FCM-shaped requests to the same nghttpd: the ceiling.",
                kind: .serverSide, batchSize: 100, appenders: 2, eventsPerRound: pushesPerRound
            ) { round in
                let seconds = try server.h2load(requests: pushesPerRound)
                return Measurement(round: round, events: pushesPerRound, elapsed: .seconds(seconds))
            },
        ]
        let configurations = try await runInterleaved(cases, rounds: rounds, unit: "pushes")
        return BenchmarkResult(
            benchmark: "fanout", configurations: configurations,
            notes: [
                "notifications per round": "\(notifications)", "pushes per round": "\(pushesPerRound)",
                "devices": "\(people) (half iOS, half Android) plus \(people / Self.twoDevicesEvery) second Android phones",
                "server": "nghttpd (Debian nghttp2-server), 1 worker, TLS, static answers; APNs and FCM both point at it",
            ])
    }

    static func sent(_ client: PostgresClient) async throws -> Int {
        try await client.withConnection { connection in
            Int(try connection.query("SELECT coalesce(sum(count), 0)::bigint FROM push_counters WHERE name LIKE 'sent.%'").scalar(Int64.self))
        }
    }

    /// `notifications` outbox rows across the categories, each for one person (a tenth of whom
    /// have two phones), written before the round's fan-out starts.
    static func fillOutbox(_ client: PostgresClient, notifications: Int, people: Int, round: Int, workers: Int, batch: Int) async throws {
        try await client.withConnection { connection in
            _ = try connection.execute(
            """
            INSERT INTO notification_outbox (notification_id, audience, recipient_id, category, event, ids, source_position, created_at, enqueued_at)
            SELECT 'n-\(round)-\(workers)x\(batch)-' || g, 'person', 'p' || (g % \(people)),
                (ARRAY['messages', 'orders', 'saved_watches', 'security'])[g % 4 + 1],
                (ARRAY['message_received', 'order_shipped', 'price_dropped', 'new_sign_in'])[g % 4 + 1],
                CASE g % 4 WHEN 0 THEN jsonb_build_object('conversationId', 'c' || g, 'messageId', 'm' || g, 'watchId', 'w' || (g % 997))
                    WHEN 1 THEN jsonb_build_object('orderId', 'o' || g, 'watchId', 'w' || (g % 997))
                    WHEN 2 THEN jsonb_build_object('watchId', 'w' || (g % 997))
                    ELSE '{}'::jsonb END,
                g, now(), now()
            FROM generate_series(0, \(notifications - 1)) AS g;
            ANALYZE notification_outbox;
            """)
        }
    }
}

/// nghttpd answering every push path with a static file: `3/device/<token>` for each iOS token,
/// FCM's send path, and an OAuth token endpoint.
final class NGHTTPSink: @unchecked Sendable {
    let directory: URL
    let port: Int
    let process: Process
    let project = "bench"

    init(iosTokens: [String]) throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("fanout-bench-\(UUID().uuidString)")
        let files = FileManager.default
        try files.createDirectory(at: directory.appendingPathComponent("htdocs/3/device"), withIntermediateDirectories: true)
        try files.createDirectory(at: directory.appendingPathComponent("htdocs/v1/projects/bench"), withIntermediateDirectories: true)
        for token in iosTokens { _ = files.createFile(atPath: directory.appendingPathComponent("htdocs/3/device/\(token)").path, contents: Data()) }
        try Data(#"{"name":"projects/bench/messages/1"}"#.utf8).write(to: directory.appendingPathComponent("htdocs/v1/projects/bench/messages:send"))
        try Data(#"{"access_token":"bench","expires_in":3600,"token_type":"Bearer"}"#.utf8).write(to: directory.appendingPathComponent("htdocs/token"))
        let credentials = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Tests/PushMocks/make_credentials.sh")
        let (status, output) = try Subprocess.run("/bin/bash", [credentials.path, directory.appendingPathComponent("credentials").path])
        guard status == 0 else { throw BenchmarkFailure(description: "make_credentials.sh failed: \(output)") }
        let nghttpd = directory
        let (started, chosen) = try Self.startListening(base: 20_000, what: "nghttpd") { candidate in
            let process = Process()
            process.executableURL = URL(fileURLWithPath: "/usr/sbin/nghttpd")
            process.arguments = [
                "--address=127.0.0.1", "--workers=1", "--htdocs=\(nghttpd.appendingPathComponent("htdocs").path)", String(candidate),
                nghttpd.appendingPathComponent("credentials/server-key.pem").path, nghttpd.appendingPathComponent("credentials/server.pem").path,
            ]
            process.standardOutput = FileHandle.nullDevice
            process.standardError = FileHandle.nullDevice
            return process
        }
        port = chosen
        process = started
    }

    /// Starts the server `make` sets up for a port, on a random port from `base` on, until one
    /// accepts connections on 127.0.0.1 within a second (another port when it exits first, at most
    /// 20 tries); the running process and its port.
    static func startListening(base: Int, what: String, _ make: (Int) throws -> Process) throws -> (Process, Int) {
        for attempt in 0..<20 {
            let candidate = base + Int.random(in: 0..<20_000) + attempt
            let process = try make(candidate)
            try process.run()
            for _ in 0..<50 {
                usleep(20_000)
                if !process.isRunning { break }
                if accepts(port: candidate) { return (process, candidate) }
            }
            if process.isRunning { kill(process.processIdentifier, SIGKILL) }
            process.waitUntilExit()
        }
        throw BenchmarkFailure(description: "\(what) did not start")
    }

    static func accepts(port: Int) -> Bool {
        let socket = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(socket) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(socket, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
        }
    }

    func stop() {
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        process.waitUntilExit()
        try? FileManager.default.removeItem(at: directory)
    }

    var base: String { "https://127.0.0.1:\(port)" }
    var caFile: String { directory.appendingPathComponent("credentials/ca.pem").path }

    func transport() throws -> PlatformTransport {
        let credentials = directory.appendingPathComponent("credentials")
        var apns = APNsTransport.Settings(
            keyId: "MOCKKEY123", teamId: "MOCKTEAM12", p8: try String(contentsOf: credentials.appendingPathComponent("apns-key.p8"), encoding: .utf8))
        apns.productionURL = base
        apns.developmentURL = base
        var json = try JSONSerialization.jsonObject(with: Data(contentsOf: credentials.appendingPathComponent("fcm-service-account.json")))
            as! [String: Any]
        json["token_uri"] = base + "/token"
        json["project_id"] = project
        var fcm = FCMTransport.Settings(serviceAccount: try FCMServiceAccount(json: Array(try JSONSerialization.data(withJSONObject: json))))
        fcm.baseURL = base
        let configuration = HTTP2Client.Configuration(caFile: caFile)
        return PlatformTransport(
            ios: try APNsTransport(settings: apns, client: try HTTP2Client(configuration: configuration), logger: .silent),
            android: FCMTransport(settings: fcm, client: try HTTP2Client(configuration: configuration), logger: .silent))
    }

    /// A rendered FCM push's body, as the fan-out sends it.
    var body: [UInt8] {
        let content = PushRenderer.render(
            PushNotification(kind: .messageReceived, ids: ["conversationId": "c1", "messageId": "m1"], notificationId: "n1"),
            language: .nl, badge: nil)
        return (try? FCMPayload.encode(content, token: "fcm-12345")) ?? []
    }

    func clientOnly(requests: Int, engine: HTTP2Client.Configuration.Engine = .nghttp2) async throws -> Duration {
        let client = try HTTP2Client(configuration: HTTP2Client.Configuration(caFile: caFile, engine: engine))
        defer { client.shutdown() }
        let request = HTTP2Request(
            method: "POST", url: base + FCMPayload.path(projectId: project),
            headers: [("authorization", "Bearer bench"), ("content-type", "application/json")], body: body, timeout: .seconds(60))
        let started = ContinuousClock.now
        // Two callers at once, as the fan-out's two workers, each in batches of 1,000.
        try await withThrowingTaskGroup(of: Void.self) { group in
            for caller in 0..<2 {
                let share = requests / 2 + (caller == 0 ? requests % 2 : 0)
                group.addTask {
                    var left = share
                    while left > 0 {
                        let count = min(1000, left)
                        left -= count
                        let answers = await client.send(Array(repeating: request, count: count))
                        for answer in answers {
                            if case .failure(let error) = answer { throw BenchmarkFailure(description: "HTTP2Client: \(error)") }
                        }
                    }
                }
            }
            try await group.waitForAll()
        }
        return ContinuousClock.now - started
    }

    /// h2load posting `requests` FCM-shaped bodies over 2 connections of 100 streams; its seconds.
    func h2load(requests: Int) throws -> Double {
        let bodyFile = directory.appendingPathComponent("body.json")
        try Data(body).write(to: bodyFile)
        let (status, output) = try Subprocess.run(
            "/usr/bin/h2load",
            [
                "-n", String(requests), "-c", "2", "-m", "100", "-d", bodyFile.path, "-H", "content-type: application/json",
                "-H", "authorization: Bearer bench", base + FCMPayload.path(projectId: project),
            ])
        guard status == 0, let line = output.split(separator: "\n").first(where: { $0.hasPrefix("finished in ") }) else {
            throw BenchmarkFailure(description: "h2load failed: \(output)")
        }
        guard output.contains("\(requests) succeeded") else { throw BenchmarkFailure(description: "h2load had failures: \(output)") }
        // "finished in 1.23s, 81234.56 req/s, 12.34MB/s"
        let words = line.split(separator: " ")
        guard words.count > 2 else { throw BenchmarkFailure(description: "h2load: \(line)") }
        let text = words[2].dropLast()  // the comma
        if text.hasSuffix("ms"), let value = Double(text.dropLast(2)) { return value / 1000 }
        if text.hasSuffix("s"), let value = Double(text.dropLast(1)) { return value }
        throw BenchmarkFailure(description: "h2load: cannot read the time of \(line)")
    }
}
