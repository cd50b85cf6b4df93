import Foundation
import HTTP2Client
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// What the libnghttp2 engine does that libcurl did for us before: h2c, ALPN, GOAWAY and
/// REFUSED_STREAM handled by sending again, a stream timed out on a live connection, the bound on
/// response headers. Against nghttpd, `openssl s_server` and Tests/PushMocks/h2_behaviour_server.py.
@Suite struct HTTP2ClientEngineTests {
    @Test func cleartextHTTP2WithPriorKnowledgeSpeaksHTTP2() async throws {
        let certificates = try TestCertificates.make()
        defer { certificates.remove() }
        let server = try NGHTTPServer.start(certificates: certificates, extraArguments: ["--no-tls"])
        defer { server.stop() }
        let client = try HTTP2Client(configuration: .init(cleartextHTTP2: true))
        defer { client.shutdown() }
        let response = try await client.send(HTTP2ClientTests.post("http://127.0.0.1:\(server.port)/h2c", "plain"))
        #expect(response.status == 200)
        #expect(response.httpVersion == 2)
        #expect(response.body == Array("plain".utf8))
        #expect(client.connectionsOpened == 1)
    }

    @Test func aTLSServerWithoutH2IsRefusedClearlyAndNotRetried() async throws {
        let certificates = try TestCertificates.make()
        defer { certificates.remove() }
        let server = try await OpenSSLServer.start(certificates: certificates)
        defer { server.stop() }
        let client = try HTTP2Client(configuration: .init(caFile: certificates.caFile))
        defer { client.shutdown() }
        do {
            let response = try await client.send(HTTP2ClientTests.post("https://127.0.0.1:\(server.port)/", "x"))
            Issue.record("answered \(response.status) over HTTP/\(response.httpVersion) though the server has no h2")
        } catch let error as HTTP2ClientError {
            #expect(error.kind == .transport)
            #expect(!error.isRetryable, "\(error)")
            #expect(error.message.contains("HTTP/2") && error.message.contains("ALPN"), "\(error.message)")
        }
    }

    @Test func cleartextHTTP2ToAnHTTP1ServerFailsClearlyAndIsNotRetried() async throws {
        let server = try await HTTP1Server.start()
        defer { server.stop() }
        let client = try HTTP2Client(configuration: .init(cleartextHTTP2: true))
        defer { client.shutdown() }
        do {
            let response = try await client.send(HTTP2Request(url: "http://127.0.0.1:\(server.port)/", timeout: .seconds(5)))
            Issue.record("answered \(response.status) over HTTP/\(response.httpVersion)")
        } catch let error as HTTP2ClientError {
            #expect(error.kind == .transport && !error.isRetryable, "\(error)")
            #expect(error.message.contains("does not speak HTTP/2"), "\(error.message)")
        }
        // Without cleartextHTTP2 the same URL is HTTP/1.1 through libcurl.
        let plain = try HTTP2Client()
        defer { plain.shutdown() }
        let response = try await plain.send(HTTP2Request(url: "http://127.0.0.1:\(server.port)/", timeout: .seconds(5)))
        #expect(response.status == 200 && response.httpVersion == 1)
    }

    @Test func aHostNameIsResolvedAndCheckedAgainstTheCertificate() async throws {
        try await HTTP2ClientTests.withServer { server, client in
            // localhost: getaddrinfo, SNI and a DNS name check (the certificate names localhost).
            let response = try await client.send(HTTP2ClientTests.post("https://localhost:\(server.port)/named", "named"))
            #expect(response.status == 200 && response.body == Array("named".utf8))
        }
    }

    @Test func theLibcurlEngineCanStillBeChosen() async throws {
        try await HTTP2ClientTests.withServer(configuration: { .init(caFile: $0.caFile, engine: .libcurl) }) { server, client in
            let response = try await client.send(HTTP2ClientTests.post(server.url("/curl"), "curl"))
            #expect(response.status == 200 && response.httpVersion == 2 && response.body == Array("curl".utf8))
        }
    }

    @Test func streamsAboveAGoAwaysLastStreamAreSentAgainOnANewConnection() async throws {
        let server = try await BehaviourServer.start(["--hold", "10", "--answer", "4"])
        defer { server.stop() }
        let client = try HTTP2Client(configuration: .init(cleartextHTTP2: true))
        defer { client.shutdown() }
        let results = await client.send((0..<10).map { HTTP2ClientTests.post("http://127.0.0.1:\(server.port)/hold/\($0)", "held \($0)") })
        var byConnection: [String: Int] = [:]
        for (index, result) in results.enumerated() {
            switch result {
            case .success(let response):
                #expect(response.status == 200 && response.body == Array("held \(index)".utf8), "\(index): \(response.status)")
                byConnection[response.header("x-connection") ?? "?", default: 0] += 1
            case .failure(let error):
                Issue.record("\(index): \(error)")
            }
        }
        // Four answered before the GOAWAY on the first connection; six the server never processed,
        // sent again on a second.
        #expect(byConnection == ["1": 4, "2": 6], "\(byConnection)")
        #expect(client.connectionsOpened == 2)
    }

    @Test func aRefusedStreamIsSentAgain() async throws {
        let server = try await BehaviourServer.start()
        defer { server.stop() }
        let client = try HTTP2Client(configuration: .init(cleartextHTTP2: true))
        defer { client.shutdown() }
        let response = try await client.send(HTTP2ClientTests.post("http://127.0.0.1:\(server.port)/refuse-once/a", "again"))
        #expect(response.status == 200 && response.body == Array("again".utf8))
    }

    @Test func responseHeadersBeyondTheBoundFailTheRequestOnly() async throws {
        let server = try await BehaviourServer.start()
        defer { server.stop() }
        let client = try HTTP2Client(configuration: .init(cleartextHTTP2: true))
        defer { client.shutdown() }
        let base = "http://127.0.0.1:\(server.port)"
        do {
            let response = try await client.send(HTTP2Request(url: base + "/big-headers"))
            Issue.record("80 KB of headers accepted: \(response.headers.count) headers")
        } catch let error as HTTP2ClientError {
            #expect(error.kind == .transport && !error.isRetryable, "\(error)")
            #expect(error.message.contains("headers"), "\(error.message)")
        }
        let after = try await client.send(HTTP2ClientTests.post(base + "/echo", "fine"))
        #expect(after.body == Array("fine".utf8))
    }
}

/// Timed, so with the other timed tests (run on their own by `make test`, TIMED_SUITES).
extension HTTP2ClientPromptnessTests {
    @Test func aStreamWithoutAnswerTimesOutAndItsConnectionKeepsWorking() async throws {
        let server = try await BehaviourServer.start()
        defer { server.stop() }
        let client = try HTTP2Client(configuration: .init(cleartextHTTP2: true))
        defer { client.shutdown() }
        let base = "http://127.0.0.1:\(server.port)"
        _ = try await client.send(HTTP2ClientTests.post(base + "/echo", "warm"))
        let started = ContinuousClock.now
        do {
            _ = try await client.send(HTTP2ClientTests.post(base + "/silent", "x", timeout: .milliseconds(300)))
            Issue.record("answered")
        } catch let error as HTTP2ClientError {
            #expect(error.curlCode == 28 && error.isRetryable, "\(error)")
        }
        let elapsed = ContinuousClock.now - started
        #expect(elapsed >= .milliseconds(250) && elapsed < .seconds(2), "\(elapsed)")
        let after = try await client.send(HTTP2ClientTests.post(base + "/echo", "still"))
        #expect(after.body == Array("still".utf8))
        #expect(client.connectionsOpened == 1, "the timed-out stream was reset, not its connection")
    }
}

/// Tests/PushMocks/h2_behaviour_server.py, on a free port. Waits with `Task.sleep`, never blocking
/// a thread of the test pool (the timed tests run beside these). `stop()` kills it (SIGKILL: a child
/// of the test runner inherits its blocked signals); closing its stdin would end it too.
final class BehaviourServer: @unchecked Sendable {
    let port: Int
    private let process: Process
    private let stdin: Pipe
    private let output: String

    static func start(_ arguments: [String] = []) async throws -> BehaviourServer {
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("PushMocks/h2_behaviour_server.py").path
        let output = FileManager.default.temporaryDirectory.appendingPathComponent("h2-behaviour-\(UUID().uuidString).out").path
        _ = FileManager.default.createFile(atPath: output, contents: nil)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        process.arguments = [script] + arguments
        let stdin = Pipe()
        process.standardInput = stdin
        process.standardOutput = try FileHandle(forWritingTo: URL(fileURLWithPath: output))
        process.standardError = try FileHandle(forWritingTo: URL(fileURLWithPath: output))
        try process.run()
        // Generous, and the file is read once more after every wait before the deadline is
        // looked at: when every suite starts at once on two cores, a wait can overrun by seconds.
        let deadline = ContinuousClock.now + .seconds(60)
        var text = ""
        while true {
            let running = process.isRunning
            text = (try? String(contentsOfFile: output, encoding: .utf8)) ?? ""
            if text.hasSuffix("\n"), let port = Int(text.trimmingCharacters(in: .whitespacesAndNewlines)) {
                return BehaviourServer(port: port, process: process, stdin: stdin, output: output)
            }
            if !running || ContinuousClock.now >= deadline { break }
            try await Task.sleep(for: .milliseconds(20))
        }
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        try? FileManager.default.removeItem(atPath: output)
        throw TestSetupError("h2_behaviour_server.py did not start (python3-h2 installed?): \(text.debugDescription)")
    }

    private init(port: Int, process: Process, stdin: Pipe, output: String) {
        self.port = port
        self.process = process
        self.stdin = stdin
        self.output = output
    }

    func stop() {
        try? stdin.fileHandleForWriting.close()
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        process.waitUntilExit()
        try? FileManager.default.removeItem(atPath: output)
    }
}

/// Starts a server that takes its port as an argument on a free port of 127.0.0.1 and waits until
/// it accepts connections, a few times over (a port found free can be taken before the server
/// binds it). Its output goes to a file: when it does not listen, the error says how it ended and
/// what it printed. The wait is long because a full parallel test run on two cores was seen to
/// take seconds to start a Python interpreter.
func startListening(
    _ name: String, executable: String, arguments: (UInt16) -> [String], wait: Duration = .seconds(20)
) async throws -> (process: Process, port: UInt16) {
    var failures: [String] = []
    for attempt in 1...4 {
        let port = try freePort()
        let logFile = FileManager.default.temporaryDirectory.path + "/\(name.replacingOccurrences(of: " ", with: "-"))-\(getpid())-\(port)-\(attempt).log"
        _ = FileManager.default.createFile(atPath: logFile, contents: nil)
        defer { try? FileManager.default.removeItem(atPath: logFile) }
        guard let log = FileHandle(forWritingAtPath: logFile) else { throw TestSetupError("cannot write \(logFile)") }
        defer { try? log.close() }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments(port)
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = log
        process.standardError = log
        try process.run()
        let started = ContinuousClock.now
        while process.isRunning && ContinuousClock.now < started + wait {
            if canConnect(port: port) { return (process, port) }
            try await Task.sleep(for: .milliseconds(20))
        }
        let ending: String
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
            ending = "still not listening after \(wait)"
        } else {
            ending = "exited with \(process.terminationStatus) after \(ContinuousClock.now - started)"
        }
        let output = ((try? String(contentsOfFile: logFile, encoding: .utf8)) ?? "").trimmingCharacters(in: .whitespacesAndNewlines)
        failures.append("port \(port): \(ending)\(output.isEmpty ? "" : ", printing: \(output.prefix(500))")")
    }
    throw TestSetupError("\(name) did not listen: " + failures.joined(separator: "; "))
}

/// `python3 -m http.server`: HTTP/1.x only, on a free port.
final class HTTP1Server: @unchecked Sendable {
    let port: UInt16
    private let process: Process

    static func start() async throws -> HTTP1Server {
        let directory = FileManager.default.temporaryDirectory.path
        let (process, port) = try await startListening("python3 -m http.server", executable: "/usr/bin/python3") {
            ["-m", "http.server", "--bind", "127.0.0.1", "--directory", directory, String($0)]
        }
        return HTTP1Server(port: port, process: process)
    }

    private init(port: UInt16, process: Process) {
        self.port = port
        self.process = process
    }

    func stop() {
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        process.waitUntilExit()
    }
}

/// `openssl s_server -www`: TLS with the test certificate and no ALPN at all.
final class OpenSSLServer: @unchecked Sendable {
    let port: UInt16
    private let process: Process

    static func start(certificates: TestCertificates) async throws -> OpenSSLServer {
        guard let executable = findExecutable("openssl") else { throw TestSetupError("openssl is not installed") }
        let (process, port) = try await startListening("openssl s_server", executable: executable) {
            ["s_server", "-accept", "127.0.0.1:\($0)", "-cert", certificates.certificateFile, "-key", certificates.keyFile, "-www", "-quiet"]
        }
        return OpenSSLServer(port: port, process: process)
    }

    private init(port: UInt16, process: Process) {
        self.port = port
        self.process = process
    }

    func stop() {
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        process.waitUntilExit()
    }
}
