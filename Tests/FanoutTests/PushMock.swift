import EventLog
import Fanout
import Foundation
import HTTP2Client
import Lifecycle
import PushProtocol

/// The APNs and FCM mock servers of Tests/PushMocks (Python on Debian's python3-h2), started for a
/// test with fresh credentials, and a way to read what they received. A mock that cannot start
/// fails the test with its own output; nothing is skipped.
final class PushMock: @unchecked Sendable {
    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    let directory: URL
    let process: Process
    let apnsProduction: Int
    let apnsDevelopment: Int
    let fcm: Int
    let control: Int
    let fcmTokenURI: String
    let client: HTTP2Client
    let stdin: Pipe
    let keyId = "MOCKKEY123"
    let teamId = "MOCKTEAM12"
    let project = "wristler-mock"

    static var mocksDirectory: URL {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("PushMocks")
    }

    static func start(_ extraArguments: [String] = []) async throws -> PushMock {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("push-mock-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        // Output to a file, not a pipe, which a server another test starts meanwhile could inherit.
        let (status, text) = try Subprocess.run("/bin/bash", [mocksDirectory.appendingPathComponent("make_credentials.sh").path, directory.path])
        guard status == 0 else { throw Failure(description: "make_credentials.sh failed: \(text)") }
        let ready = directory.appendingPathComponent("ready.json")
        let log = directory.appendingPathComponent("mock.log")
        _ = FileManager.default.createFile(atPath: log.path, contents: nil)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        process.arguments =
            [
                mocksDirectory.appendingPathComponent("push_mock.py").path,
                "--cert", directory.appendingPathComponent("server.pem").path, "--key", directory.appendingPathComponent("server-key.pem").path,
                "--apns-key-pem", directory.appendingPathComponent("apns-key-public.pem").path, "--apns-key-id", "MOCKKEY123",
                "--apns-team-id", "MOCKTEAM12", "--fcm-project", "wristler-mock",
                "--fcm-client-email", "push-mock@wristler-mock.iam.gserviceaccount.com",
                "--fcm-public-key-pem", directory.appendingPathComponent("fcm-key-public.pem").path,
                "--ready-file", ready.path, "--parent-pid", String(ProcessInfo.processInfo.processIdentifier),
            ] + extraArguments
        // A pipe the test holds: if the test runner dies, the mock reads its end and stops.
        let stdin = Pipe()
        process.standardInput = stdin
        process.standardOutput = try FileHandle(forWritingTo: log)
        process.standardError = try FileHandle(forWritingTo: log)
        try process.run()
        // Generous: when every suite starts at once on two cores, a start (or a wait) can take seconds.
        let deadline = ContinuousClock.now + .seconds(60)
        while !FileManager.default.fileExists(atPath: ready.path) {
            guard process.isRunning, ContinuousClock.now < deadline else {
                // Written meanwhile (the wait overran the deadline): started after all.
                if FileManager.default.fileExists(atPath: ready.path) { break }
                process.terminate()
                let text = (try? String(contentsOf: log, encoding: .utf8)) ?? ""
                throw Failure(description: "the push mock did not start (is python3-h2 installed? `make test` installs it): \(text)")
            }
            try await Task.sleep(for: .milliseconds(50))
        }
        let ports = try JSONSerialization.jsonObject(with: Data(contentsOf: ready)) as! [String: Any]
        return PushMock(
            directory: directory, process: process, apnsProduction: ports["apnsProduction"] as! Int,
            apnsDevelopment: ports["apnsDevelopment"] as! Int, fcm: ports["fcm"] as! Int, control: ports["control"] as! Int,
            fcmTokenURI: ports["fcmTokenUri"] as! String, client: try HTTP2Client(configuration: .init(maxResponseBytes: 256 << 20)), stdin: stdin)
    }

    private init(
        directory: URL, process: Process, apnsProduction: Int, apnsDevelopment: Int, fcm: Int, control: Int, fcmTokenURI: String,
        client: HTTP2Client, stdin: Pipe
    ) {
        self.stdin = stdin
        self.directory = directory
        self.process = process
        self.apnsProduction = apnsProduction
        self.apnsDevelopment = apnsDevelopment
        self.fcm = fcm
        self.control = control
        self.fcmTokenURI = fcmTokenURI
        self.client = client
    }

    /// Closes the mock's standard input, which ends it; SIGKILL after two seconds (a child of the
    /// test runner inherits its blocked signals, so SIGTERM may never arrive).
    func stop() {
        try? stdin.fileHandleForWriting.close()
        let deadline = ContinuousClock.now + .seconds(2)
        while process.isRunning && ContinuousClock.now < deadline { usleep(20_000) }
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        Subprocess.waitForExit(of: process)
        client.shutdown()
        try? FileManager.default.removeItem(at: directory)
    }

    var caFile: String { directory.appendingPathComponent("ca.pem").path }

    /// The service account with its token endpoint at the mock.
    func serviceAccount() throws -> FCMServiceAccount {
        let file = directory.appendingPathComponent("fcm-service-account.json")
        var json = try JSONSerialization.jsonObject(with: Data(contentsOf: file)) as! [String: Any]
        json["token_uri"] = fcmTokenURI
        return try FCMServiceAccount(json: Array(try JSONSerialization.data(withJSONObject: json)))
    }

    func p8() throws -> String { try String(contentsOf: directory.appendingPathComponent("apns-key.p8"), encoding: .utf8) }

    /// The transports a fan-out uses to reach this mock: APNs for iOS, FCM for Android.
    func transport(logger: Logger = .silent, defaultTopic: String = "eu.wristler.app") throws -> PlatformTransport {
        var apns = APNsTransport.Settings(keyId: keyId, teamId: teamId, p8: try p8())
        apns.productionURL = "https://127.0.0.1:\(apnsProduction)"
        apns.developmentURL = "https://127.0.0.1:\(apnsDevelopment)"
        apns.defaultTopic = defaultTopic
        var fcmSettings = FCMTransport.Settings(serviceAccount: try serviceAccount())
        fcmSettings.baseURL = "https://127.0.0.1:\(fcm)"
        let configuration = HTTP2Client.Configuration(caFile: caFile)
        return PlatformTransport(
            ios: try APNsTransport(settings: apns, client: try HTTP2Client(configuration: configuration), logger: logger),
            android: FCMTransport(settings: fcmSettings, client: try HTTP2Client(configuration: configuration), logger: logger))
    }

    /// Every request the mock received (pushes and token requests), in order of arrival.
    func requests() async throws -> [[String: Any]] {
        let response = try await client.send(HTTP2Request(url: "http://127.0.0.1:\(control)/requests"))
        let document = try JSONSerialization.jsonObject(with: Data(response.body)) as! [String: Any]
        return document["requests"] as! [[String: Any]]
    }

    /// The pushes received (APNs and FCM sends, not token requests).
    func pushes() async throws -> [Push] {
        try await requests().compactMap(Push.init)
    }

    func post(_ path: String, _ json: String = "{}") async throws {
        let response = try await client.send(
            HTTP2Request(method: "POST", url: "http://127.0.0.1:\(control)\(path)", headers: [("content-type", "application/json")], body: Array(json.utf8)))
        guard response.status == 200 else { throw Failure(description: "POST \(path): \(response.status)") }
    }

    /// Waits until `predicate` holds for the pushes received, and returns them.
    func waitForPushes(timeout: Duration = .seconds(30), _ predicate: ([Push]) -> Bool) async throws -> [Push] {
        let deadline = ContinuousClock.now + timeout
        var pushes: [Push] = []
        while ContinuousClock.now < deadline {
            pushes = try await self.pushes()
            if predicate(pushes) { return pushes }
            try await Task.sleep(for: .milliseconds(100))
        }
        throw Failure(description: "the mock did not receive the expected pushes within \(timeout); it has \(pushes.count): \(pushes)")
    }
}

/// One push as the mock received it.
struct Push: CustomStringConvertible {
    var listener: String
    var token: String
    var status: Int
    var reason: String?
    var headers: [String: String]
    var title: String
    var body: String
    /// `data` (FCM) or the custom keys beside `aps` (APNs).
    var data: [String: String]
    var badge: Int?
    /// `apns-collapse-id` or FCM's `android.notification.tag`.
    var collapse: String?
    var collapseKey: String?
    /// Whether the mock wrote its answer out (false: the client was gone first).
    var sent: Bool
    var connection: Int

    init?(_ request: [String: Any]) {
        guard let listener = request["listener"] as? String, let path = request["path"] as? String else { return nil }
        self.listener = listener
        headers = request["headers"] as? [String: String] ?? [:]
        status = (request["response"] as? [String: Any])?["status"] as? Int ?? 0
        reason = request["reason"] as? String
        sent = request["sent"] as? Bool ?? false
        connection = request["connection"] as? Int ?? 0
        let body = request["body"] as? [String: Any] ?? [:]
        if listener == "fcm" {
            guard path.hasSuffix("/messages:send"), let message = body["message"] as? [String: Any] else { return nil }
            token = message["token"] as? String ?? ""
            let notification = message["notification"] as? [String: Any] ?? [:]
            title = notification["title"] as? String ?? ""
            self.body = notification["body"] as? String ?? ""
            data = message["data"] as? [String: String] ?? [:]
            let android = message["android"] as? [String: Any] ?? [:]
            collapse = (android["notification"] as? [String: Any])?["tag"] as? String
            collapseKey = android["collapse_key"] as? String
            badge = nil
        } else {
            token = String(path.dropFirst("/3/device/".count))
            let aps = body["aps"] as? [String: Any] ?? [:]
            let alert = aps["alert"] as? [String: Any] ?? [:]
            title = alert["title"] as? String ?? ""
            self.body = alert["body"] as? String ?? ""
            badge = aps["badge"] as? Int
            var data: [String: String] = [:]
            for (key, value) in body where key != "aps" { data[key] = value as? String ?? "\(value)" }
            self.data = data
            collapse = headers["apns-collapse-id"]
            collapseKey = nil
        }
    }

    var description: String {
        "\(listener) \(token.prefix(12)) \(status) \(reason ?? "") \(data["event"] ?? "") connection \(connection)\(sent ? "" : " (answer not sent)")"
    }
}
