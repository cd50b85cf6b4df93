// What the mail tests share (Tests/MailTests, Tests/MailerTests): the SMTP relay of
// Tests/MailMocks/smtp_mock.py, and mails read back by Python's `email` package.
import EventLog
import Foundation
import Mail

#if canImport(Glibc)
    import Glibc
#endif

public struct TestFailure: Error, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}

public enum MailMocks {
    public static var directory: URL {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("MailMocks")
    }

    public static func temporaryDirectory(_ prefix: String) throws -> URL {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("\(prefix)-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        return directory
    }
}

/// A mail as Python's `email` package reads it (Tests/MailMocks/parse_mail.py).
public struct ParsedMail: Decodable, Sendable {
    public struct Part: Decodable, Sendable {
        public var contentType: String
        public var charset: String?
        public var transferEncoding: String?
        public var content: String
    }

    public var subject: String
    public var fromName: String
    public var fromAddress: String
    public var toName: String
    public var toAddress: String
    public var messageId: String
    public var mimeVersion: String
    public var date: Double?
    public var listUnsubscribe: String?
    public var listUnsubscribePost: String?
    public var contentType: String
    public var parts: [Part]
    public var defects: [String]
    public var longestLine: Int
    public var bareLineFeeds: Int

    /// Parses the file at `path`; output goes through a file (Subprocess), never a pipe.
    public static func parse(file path: String) throws -> ParsedMail {
        let (status, output) = try Subprocess.run("/usr/bin/python3", ["-W", "ignore", MailMocks.directory.appendingPathComponent("parse_mail.py").path, path])
        guard status == 0 else { throw TestFailure("parse_mail.py failed with status \(status): \(output)") }
        do {
            return try JSONDecoder().decode(ParsedMail.self, from: Data(output.utf8))
        } catch {
            throw TestFailure("parse_mail.py printed something that is not its JSON (\(error)): \(output)")
        }
    }

    public static func parse(_ bytes: [UInt8]) throws -> ParsedMail {
        let directory = try MailMocks.temporaryDirectory("mail-parse")
        defer { try? FileManager.default.removeItem(at: directory) }
        let file = directory.appendingPathComponent("mail.eml")
        try Data(bytes).write(to: file)
        return try parse(file: file.path)
    }
}

/// The SMTP relay of Tests/MailMocks/smtp_mock.py (Debian's python3-aiosmtpd), started for one
/// test with a fresh certificate. A mock that cannot start fails the test with its own output.
public final class SMTPMock: @unchecked Sendable {
    public enum Security: Sendable {
        case plain, startTLS, smtps
    }

    public struct Received {
        public var bytes: [UInt8]
        public var mailFrom: String
        public var recipients: [String]
        public var tls: Bool
        public var authenticated: Bool
        /// The client's address and port as the server saw them: the same for mails on one connection.
        public var peer: String
    }

    public let directory: URL
    public let process: Process
    public let port: Int
    public let security: Security

    public var caFile: String { directory.appendingPathComponent("ca.pem").path }
    public var mailFolder: URL { directory.appendingPathComponent("received") }
    public var url: String { "\(security == .smtps ? "smtps" : "smtp")://127.0.0.1:\(port)" }

    public static func start(_ security: Security, user: String? = nil, password: String? = nil) throws -> SMTPMock {
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
                Subprocess.waitForExit(of: process)
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
    public func stop() {
        _ = FileManager.default.createFile(atPath: directory.appendingPathComponent("stop").path, contents: nil)
        let deadline = ContinuousClock.now + .seconds(2)
        while process.isRunning && ContinuousClock.now < deadline { usleep(20_000) }
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        Subprocess.waitForExit(of: process)
        try? FileManager.default.removeItem(at: directory)
    }

    /// The mails the mock accepted, in order.
    public func received() throws -> [Received] {
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

    public var log: String { (try? String(contentsOf: directory.appendingPathComponent("mock.log"), encoding: .utf8)) ?? "" }
}
