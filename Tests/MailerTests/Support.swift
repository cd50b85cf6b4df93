import EventLog
import Foundation
import InboxDomain
import InboxTesting
import Mail
import Mailer
import PostgresClient
import Projections

#if canImport(Glibc)
    import Glibc
#endif

struct TestFailure: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

enum MailMocks {
    static var directory: URL {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("MailMocks")
    }

    static func temporaryDirectory(_ prefix: String) throws -> URL {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("\(prefix)-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        return directory
    }
}

// The SMTP mock and the mail reader are Tests/MailTests' (Support.swift there), shared through Tests/MailMocks.

/// A mail as Python's `email` package reads it (Tests/MailMocks/parse_mail.py).
struct ParsedMail: Decodable {
    struct Part: Decodable {
        var contentType: String
        var charset: String?
        var transferEncoding: String?
        var content: String
    }

    var subject: String
    var fromName: String
    var fromAddress: String
    var toName: String
    var toAddress: String
    var messageId: String
    var mimeVersion: String
    var date: Double?
    var listUnsubscribe: String?
    var listUnsubscribePost: String?
    var contentType: String
    var parts: [Part]
    var defects: [String]
    var longestLine: Int
    var bareLineFeeds: Int

    /// Parses the file at `path`; output goes through a file (Subprocess), never a pipe.
    static func parse(file path: String) throws -> ParsedMail {
        let (status, output) = try Subprocess.run("/usr/bin/python3", ["-W", "ignore", MailMocks.directory.appendingPathComponent("parse_mail.py").path, path])
        guard status == 0 else { throw TestFailure("parse_mail.py failed with status \(status): \(output)") }
        do {
            return try JSONDecoder().decode(ParsedMail.self, from: Data(output.utf8))
        } catch {
            throw TestFailure("parse_mail.py printed something that is not its JSON (\(error)): \(output)")
        }
    }

    static func parse(_ bytes: [UInt8]) throws -> ParsedMail {
        let directory = try MailMocks.temporaryDirectory("mail-parse")
        defer { try? FileManager.default.removeItem(at: directory) }
        let file = directory.appendingPathComponent("mail.eml")
        try Data(bytes).write(to: file)
        return try parse(file: file.path)
    }
}

/// The SMTP relay of Tests/MailMocks/smtp_mock.py (Debian's python3-aiosmtpd), started for one
/// test with a fresh certificate. A mock that cannot start fails the test with its own output.
final class SMTPMock: @unchecked Sendable {
    enum Security {
        case plain, startTLS, smtps
    }

    struct Received {
        var bytes: [UInt8]
        var mailFrom: String
        var recipients: [String]
        var tls: Bool
        var authenticated: Bool
        /// The client's address and port as the server saw them: the same for mails on one connection.
        var peer: String
    }

    let directory: URL
    let process: Process
    let port: Int
    let security: Security

    var caFile: String { directory.appendingPathComponent("ca.pem").path }
    var mailFolder: URL { directory.appendingPathComponent("received") }
    var url: String { "\(security == .smtps ? "smtps" : "smtp")://127.0.0.1:\(port)" }

    static func start(_ security: Security, user: String? = nil, password: String? = nil) throws -> SMTPMock {
        let directory = try MailMocks.temporaryDirectory("smtp-mock")
        var arguments = [
            "-W", "ignore", MailMocks.directory.appendingPathComponent("smtp_mock.py").path,
            "--port-file", directory.appendingPathComponent("port").path, "--folder", directory.appendingPathComponent("received").path,
            "--stop-file", directory.appendingPathComponent("stop").path, "--parent-pid", String(getpid()),
        ]
        if security != .plain {
            let (status, text) = try Subprocess.run("/bin/bash", [MailMocks.directory.appendingPathComponent("make_certificate.sh").path, directory.path])
            guard status == 0 else { throw TestFailure("make_certificate.sh failed: \(text)") }
            arguments += ["--cert", directory.appendingPathComponent("server.pem").path, "--key", directory.appendingPathComponent("server-key.pem").path]
        }
        if security == .smtps { arguments.append("--smtps") }
        if let user, let password { arguments += ["--user", user, "--password", password] }

        let log = directory.appendingPathComponent("mock.log")
        _ = FileManager.default.createFile(atPath: log.path, contents: nil)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        process.arguments = arguments
        // Files, not pipes: a pipe could be inherited by a server another test starts meanwhile.
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = try FileHandle(forWritingTo: log)
        process.standardError = try FileHandle(forWritingTo: log)
        try process.run()
        let portFile = directory.appendingPathComponent("port")
        let deadline = ContinuousClock.now + .seconds(20)
        while !FileManager.default.fileExists(atPath: portFile.path) {
            guard process.isRunning, ContinuousClock.now < deadline else {
                if process.isRunning { kill(process.processIdentifier, SIGKILL) }
                process.waitUntilExit()
                let text = (try? String(contentsOf: log, encoding: .utf8)) ?? ""
                throw TestFailure(
                    "The SMTP mock did not start (it needs Debian's python3-aiosmtpd: `make test` installs it, or `apt-get install -y python3-aiosmtpd`): \(text)")
            }
            usleep(20_000)
        }
        let port = Int(try String(contentsOf: portFile, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0
        return SMTPMock(directory: directory, process: process, port: port, security: security)
    }

    private init(directory: URL, process: Process, port: Int, security: Security) {
        self.directory = directory
        self.process = process
        self.port = port
        self.security = security
    }

    /// Asks the mock to stop (a file it watches); SIGKILL after two seconds (a child of the test
    /// runner inherits its blocked signals, so SIGTERM may never arrive).
    func stop() {
        _ = FileManager.default.createFile(atPath: directory.appendingPathComponent("stop").path, contents: nil)
        let deadline = ContinuousClock.now + .seconds(2)
        while process.isRunning && ContinuousClock.now < deadline { usleep(20_000) }
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        process.waitUntilExit()
        try? FileManager.default.removeItem(at: directory)
    }

    /// The mails the mock accepted, in order.
    func received() throws -> [Received] {
        let names = ((try? FileManager.default.contentsOfDirectory(atPath: mailFolder.path)) ?? []).filter { $0.hasSuffix(".eml") }.sorted()
        return try names.map { name in
            let base = mailFolder.appendingPathComponent(String(name.dropLast(4)))
            let envelope = try JSONSerialization.jsonObject(with: Data(contentsOf: base.appendingPathExtension("json"))) as? [String: Any] ?? [:]
            return Received(
                bytes: Array(try Data(contentsOf: base.appendingPathExtension("eml"))), mailFrom: envelope["mail_from"] as? String ?? "",
                recipients: envelope["rcpt_tos"] as? [String] ?? [], tls: envelope["tls"] as? Bool ?? false,
                authenticated: envelope["auth"] as? Bool ?? false, peer: envelope["peer"] as? String ?? "")
        }
    }

    var log: String { (try? String(contentsOf: directory.appendingPathComponent("mock.log"), encoding: .utf8)) ?? "" }
}

/// The time the tests' mailers see: set by the test, moved forward, never waited for.
final class MovedClock: @unchecked Sendable {
    private let lock = NSLock()
    private var current: Date

    init(_ start: Date) { current = start }

    var now: Date { lock.withLock { current } }

    func set(_ date: Date) { lock.withLock { current = date } }

    func advance(_ seconds: TimeInterval) { lock.withLock { current = current.addingTimeInterval(seconds) } }
}

/// A whole second, so that intervals from it are exact in `Date` and in PostgreSQL's microseconds.
let start = Date(timeIntervalSince1970: (Date().timeIntervalSince1970 + 86_400).rounded(.down))
let hour: TimeInterval = 3600

let signer = try! UnsubscribeLink(keys: [try! UnsubscribeLink.Key(version: 1, secret: [UInt8](repeating: 5, count: 32))], current: 1)
let sender = try! MailAddress("notifications@wristler.example", displayName: "Wristler")

extension TestDatabase {
    /// Appends `events` in order and waits until every projection has applied them.
    func appendAndProject(_ events: [any CatalogueEvent]) async throws {
        _ = try await store.append(try events.map { try NewEvent(catalogueEvent: $0) })
        try await withProjectors { try await self.waitUntilProjected() }
    }

    func setContact(_ person: String, _ address: String, _ language: Language) async throws {
        try await client.withConnection { connection in
            _ = try Contacts.set(personId: person, address: try MailAddress(address), language: language, on: connection)
        }
    }

    /// One round of `mailer` on a pooled connection.
    @discardableResult
    func round(_ mailer: MailSender, limit: Int = 100) async throws -> MailSender.Round {
        try await client.withConnection { connection in try mailer.round(limit: limit, on: connection) }
    }

    func mailCounters() async throws -> [String: Int64] {
        try await client.withConnection { try MailOutboxStore.counters(on: $0) }
    }

    func queued(_ person: String) async throws -> [String] {
        try await client.withConnection { connection in
            try connection.query("SELECT event FROM mail_queue WHERE person_id = $1 ORDER BY outbox_id", person).map { try $0.decode(String.self, at: 0) }
        }
    }
}

/// The `.eml` files a folder transport wrote, oldest first, as Python reads them.
func mails(in folder: URL) throws -> [ParsedMail] {
    // Not the hidden `.tmp-…` name a mail is written under before its rename.
    let names = ((try? FileManager.default.contentsOfDirectory(atPath: folder.path)) ?? []).filter { $0.hasSuffix(".eml") && !$0.hasPrefix(".") }.sorted()
    return try names.map { try ParsedMail.parse(file: folder.appendingPathComponent($0).path) }
}

extension ParsedMail {
    var text: String { parts.first { $0.contentType == "text/plain" }?.content ?? "" }
    var html: String { parts.first { $0.contentType == "text/html" }?.content ?? "" }
}

/// A transport that takes its time, so that two mailers' rounds overlap.
struct SlowTransport: MailTransport {
    let inner: any MailTransport
    func send(_ message: MailMessage) -> MailOutcome {
        usleep(20_000)
        return inner.send(message)
    }
}
