import Foundation
import Testing

import MailTesting
@testable import Mail

@Suite struct FolderTransportTests {
    @Test func eachMailIsWrittenWholeAsAParseableEMLFile() throws {
        let directory = try MailMocks.temporaryDirectory("mail-folder")
        defer { try? FileManager.default.removeItem(at: directory) }
        let folder = directory.appendingPathComponent("not/yet/there").path
        let transport = FolderTransport(folder: folder)
        let first = try MailMessage.sample(subject: "Votre montre a été vendue", language: "fr")
        let second = try MailMessage.sample(subject: "Uw horloge is verkocht", language: "nl")
        #expect(transport.send(first) == .sent)
        #expect(transport.send(second) == .sent)
        let names = try FileManager.default.contentsOfDirectory(atPath: folder).sorted()
        #expect(names.count == 2, "no temporary file is left: \(names)")
        #expect(names.allSatisfy { $0.hasSuffix(".eml") && !$0.hasPrefix(".") })
        #expect(names.contains(FolderTransport.fileName(for: first)))
        let path = (folder as NSString).appendingPathComponent(FolderTransport.fileName(for: first))
        #expect(Array(try Data(contentsOf: URL(fileURLWithPath: path))) == first.rendered())
        let parsed = try ParsedMail.parse(file: path)
        #expect(parsed.defects == [])
        #expect(parsed.subject == "Votre montre a été vendue")
        #expect(parsed.parts.map(\.contentType) == ["text/plain", "text/html"])
        #expect(parsed.parts.map(\.charset) == ["utf-8", "utf-8"])
    }

    @Test func theFileNameIsTheUTCTimeAndAHashOfTheMessageID() throws {
        let message = try MailMessage(
            from: MailAddress("a@wristler.eu"), to: MailAddress("b@example.com"), subject: "s", textBody: "", htmlBody: "", messageID: "<one@wristler.eu>",
            date: Date(timeIntervalSince1970: 1_796_089_681.25))
        let name = FolderTransport.fileName(for: message)
        #expect(name.hasPrefix("20261201T014801.250Z-") && name.hasSuffix(".eml") && name.count == 21 + 16 + 4)
    }

    @Test func aFolderThatCannotBeWrittenIsATemporaryFailure() throws {
        let directory = try MailMocks.temporaryDirectory("mail-folder")
        defer { try? FileManager.default.removeItem(at: directory) }
        let file = directory.appendingPathComponent("a-file")
        try Data("x".utf8).write(to: file)
        let outcome = FolderTransport(folder: file.path).send(try .sample())
        guard case .temporary(code: 0, let text) = outcome else {
            Issue.record("writing into a file as a folder gave \(outcome)")
            return
        }
        #expect(text.contains(file.path))
    }
}

@Suite struct MailConfigurationTests {
    private func refusal(_ environment: [String: String]) -> String? {
        do {
            _ = try MailConfiguration.from(environment: environment)
            return nil
        } catch let error as MailError {
            #expect(error.code == .invalidSetting)
            return error.description
        } catch {
            return "\(error)"
        }
    }

    @Test func withoutARelayMailsGoToTheDataFolder() throws {
        let configuration = try MailConfiguration.from(environment: [:])
        #expect(configuration.delivery == .folder(".inbox/mail"))
        #expect(configuration.from == MailConfiguration.developmentSender)
        #expect(configuration.unsubscribe == nil)
        #expect(try MailConfiguration.from(environment: ["INBOX_DATA_DIR": "/var/lib/inbox"]).delivery == .folder("/var/lib/inbox/mail"))
        #expect(try MailConfiguration.from(environment: ["INBOX_MAIL_FOLDER": "/tmp/m"]).delivery == .folder("/tmp/m"))
        #expect(try MailConfiguration.from(environment: ["INBOX_MAIL_FOLDER": "/tmp/m"]).makeTransport() is FolderTransport)
    }

    @Test func aRelayIsReadWithItsCredentialsAndTimeouts() throws {
        let configuration = try MailConfiguration.from(environment: [
            "INBOX_SMTP_URL": "smtp://relay.example.com:587", "INBOX_SMTP_USERNAME": "inbox", "INBOX_SMTP_PASSWORD": " secret ",
            "INBOX_MAIL_FROM": "Wristler <notifications@wristler.eu>", "INBOX_SMTP_CONNECT_TIMEOUT_SECONDS": "3", "INBOX_SMTP_TIMEOUT_SECONDS": "30",
        ])
        #expect(
            configuration.delivery
                == .smtp(
                    .init(
                        url: "smtp://relay.example.com:587", username: "inbox", password: " secret ", allowPlain: false, connectTimeout: .seconds(3),
                        totalTimeout: .seconds(30))))
        #expect(configuration.from.displayName == "Wristler" && configuration.from.address == "notifications@wristler.eu")
        #expect(try configuration.makeTransport() is SMTPTransport)
        let plain = try MailConfiguration.from(environment: [
            "INBOX_SMTP_URL": "smtp://127.0.0.1:25", "INBOX_SMTP_ALLOW_PLAIN": "1", "INBOX_MAIL_FROM": "inbox@wristler.eu",
        ])
        guard case .smtp(let settings) = plain.delivery else {
            Issue.record("a relay was not read")
            return
        }
        #expect(settings.allowPlain && settings.username == nil && settings.connectTimeout == .seconds(10) && settings.totalTimeout == .seconds(60))
    }

    @Test func badValuesAreRefusedWithASentenceNamingTheSetting() {
        let relay = ["INBOX_SMTP_URL": "smtps://relay.example.com", "INBOX_MAIL_FROM": "inbox@wristler.eu"]
        let cases: [(String, [String: String])] = [
            ("INBOX_SMTP_URL", ["INBOX_SMTP_URL": "http://relay", "INBOX_MAIL_FROM": "inbox@wristler.eu"]),
            ("INBOX_SMTP_URL", ["INBOX_SMTP_URL": "smtp://user:pw@relay:587", "INBOX_MAIL_FROM": "inbox@wristler.eu"]),
            ("INBOX_MAIL_FROM", ["INBOX_SMTP_URL": "smtp://relay:587"]),
            ("INBOX_MAIL_FROM", ["INBOX_MAIL_FROM": "not an address"]),
            ("INBOX_MAIL_FROM", ["INBOX_MAIL_FROM": "Evil\r\nBcc: x@y.z <a@b.c>"]),
            ("INBOX_SMTP_PASSWORD", relay.merging(["INBOX_SMTP_USERNAME": "inbox"]) { $1 }),
            ("INBOX_SMTP_ALLOW_PLAIN", relay.merging(["INBOX_SMTP_ALLOW_PLAIN": "yes"]) { $1 }),
            ("INBOX_SMTP_TIMEOUT_SECONDS", relay.merging(["INBOX_SMTP_TIMEOUT_SECONDS": "0"]) { $1 }),
            ("INBOX_SMTP_CONNECT_TIMEOUT_SECONDS", relay.merging(["INBOX_SMTP_CONNECT_TIMEOUT_SECONDS": "ten"]) { $1 }),
            ("INBOX_SMTP_CA_FILE", relay.merging(["INBOX_SMTP_CA_FILE": "/nonexistent/ca.pem"]) { $1 }),
            ("INBOX_SMTP_USERNAME", ["INBOX_SMTP_USERNAME": "inbox"]),
            ("INBOX_UNSUBSCRIBE_KEYS", ["INBOX_UNSUBSCRIBE_KEYS": "1:short"]),
        ]
        for (setting, environment) in cases {
            let text = refusal(environment)
            #expect(text?.contains(setting) == true && text?.hasSuffix(".") == true, "\(setting): \(text ?? "accepted")")
            #expect(text.map { !$0.contains("\r") && !$0.contains("\n") } ?? true)
        }
    }
}
