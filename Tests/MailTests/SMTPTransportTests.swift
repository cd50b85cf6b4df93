import Foundation
import Testing

import MailTesting
@testable import Mail

#if canImport(Glibc)
    import Glibc
#endif

/// Against a real SMTP server: Tests/MailMocks/smtp_mock.py on Debian's python3-aiosmtpd.
@Suite struct SMTPTransportTests {
    private func transport(_ mock: SMTPMock, username: String? = nil, password: String? = nil, allowPlain: Bool = false) throws -> SMTPTransport {
        try SMTPTransport(
            settings: .init(
                url: mock.url, username: username, password: password, caFile: mock.security == .plain ? nil : mock.caFile, allowPlain: allowPlain,
                connectTimeout: .seconds(5), totalTimeout: .seconds(20)))
    }

    @Test func aMailGoesOutOverSTARTTLSWithAuthenticationAndArrivesWhole() throws {
        let mock = try SMTPMock.start(.startTLS, user: "inbox", password: "s3cret pass")
        defer { mock.stop() }
        let smtp = try transport(mock, username: "inbox", password: "s3cret pass")
        let message = try MailMessage.sample()
        #expect(smtp.send(message) == .sent, "mock log: \(mock.log)")
        let received = try mock.received()
        try #require(received.count == 1)
        #expect(received[0].tls && received[0].authenticated)
        #expect(received[0].mailFrom == "notifications@wristler.eu")
        #expect(received[0].recipients == ["anna@example.com"])
        let parsed = try ParsedMail.parse(received[0].bytes)
        #expect(parsed.defects == [])
        #expect(parsed.subject == "Ihre Uhr wurde verkauft – Größe 42")
        #expect(parsed.toName == "Anna Müller")
        #expect(parsed.parts.map(\.contentType) == ["text/plain", "text/html"])
        #expect(parsed.parts.map(\.charset) == ["utf-8", "utf-8"])
        #expect(parsed.parts.first?.content == "Hallo Anna,\nIhre Uhr wurde verkauft.\n")
        #expect(parsed.listUnsubscribePost == "List-Unsubscribe=One-Click")
        #expect(parsed.messageId == message.messageID)

        // A second mail on the same transport (the kept handle and its connection) arrives too.
        let second = try MailMessage.sample(to: "ben@example.com", subject: "Votre montre a été vendue", language: "fr")
        #expect(smtp.send(second) == .sent)
        let both = try mock.received()
        #expect(both.count == 2)
        #expect(both[0].peer == both[1].peer && !both[0].peer.isEmpty, "the second mail reused the first one's connection: \(both.map(\.peer))")
        #expect(try ParsedMail.parse(both.last!.bytes).subject == "Votre montre a été vendue")
    }

    @Test func theReceivedBytesAreTheComposedBytes() throws {
        let mock = try SMTPMock.start(.startTLS)
        defer { mock.stop() }
        let message = try MailMessage.sample()
        let composed = message.rendered()
        #expect(try transport(mock).send(message) == .sent)
        let received = try #require(try mock.received().first)
        // aiosmtpd keeps the data as sent minus the final CRLF that ends it with the dot.
        #expect(received.bytes == composed || received.bytes + [13, 10] == composed)
    }

    @Test func smtpsIsTLSFromTheFirstByte() throws {
        let mock = try SMTPMock.start(.smtps, user: "inbox", password: "pw")
        defer { mock.stop() }
        #expect(try transport(mock, username: "inbox", password: "pw").send(try .sample()) == .sent, "mock log: \(mock.log)")
        let received = try mock.received()
        #expect(received.count == 1 && received.first?.tls == true && received.first?.authenticated == true)
    }

    @Test func aRelayWithoutSTARTTLSIsRefusedUnlessPlainIsAllowed() throws {
        let mock = try SMTPMock.start(.plain)
        defer { mock.stop() }
        let refused = try transport(mock).send(try .sample())
        guard case .temporary(code: 0, _) = refused else {
            Issue.record("a relay without STARTTLS gave \(refused), not a temporary failure without a reply code")
            return
        }
        #expect(try mock.received().isEmpty, "nothing was sent in plain text")
        #expect(try transport(mock, allowPlain: true).send(try .sample()) == .sent)
        let received = try mock.received()
        #expect(received.count == 1 && received.first?.tls == false)
    }

    @Test func a451ReplyIsTemporary() throws {
        let mock = try SMTPMock.start(.startTLS)
        defer { mock.stop() }
        let outcome = try transport(mock).send(try .sample(to: "temp.anna@example.com"))
        #expect(outcome == .temporary(code: 451, text: "4.3.0 try later"))
        #expect(try mock.received().isEmpty)
    }

    @Test func a550ReplyIsPermanent() throws {
        let mock = try SMTPMock.start(.startTLS)
        defer { mock.stop() }
        let smtp = try transport(mock)
        #expect(smtp.send(try .sample(to: "perm.anna@example.com")) == .permanent(code: 550, text: "5.1.1 no such user"))
        // The transport is still usable after a refusal.
        #expect(smtp.send(try .sample()) == .sent)
        #expect(try mock.received().count == 1)
    }

    @Test func aWrongPasswordIsTemporarySoNoMailIsLost() throws {
        let mock = try SMTPMock.start(.startTLS, user: "inbox", password: "right")
        defer { mock.stop() }
        let outcome = try transport(mock, username: "inbox", password: "wrong").send(try .sample())
        #expect(outcome == .temporary(code: 535, text: "5.7.8 Authentication credentials invalid"))
        #expect(try mock.received().isEmpty)
    }

    @Test func anUntrustedCertificateIsTemporaryAndSendsNothing() throws {
        let mock = try SMTPMock.start(.startTLS)
        defer { mock.stop() }
        let smtp = try SMTPTransport(settings: .init(url: mock.url, connectTimeout: .seconds(5), totalTimeout: .seconds(20)))
        guard case .temporary(code: 0, _) = smtp.send(try .sample()) else {
            Issue.record("a self-signed relay was not refused as a temporary failure")
            return
        }
        #expect(try mock.received().isEmpty)
    }

    @Test func aRelayThatIsDownIsTemporary() throws {
        // A port that was free a moment ago: nothing listens on it.
        let probe = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(probe, $0, length) } }
        _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(probe, $0, &length) } }
        close(probe)
        let port = Int(UInt16(bigEndian: address.sin_port))
        let smtp = try SMTPTransport(settings: .init(url: "smtp://127.0.0.1:\(port)", connectTimeout: .seconds(2), totalTimeout: .seconds(5)))
        let outcome = smtp.send(try .sample())
        guard case .temporary(code: 0, let text) = outcome else {
            Issue.record("a relay that is down gave \(outcome)")
            return
        }
        #expect(!text.isEmpty)
    }

    @Test func aRelayThatNeverAnswersIsTemporaryWithinTheTimeout() throws {
        // A socket that listens but never accepts: the connection opens, no greeting ever comes.
        let silent = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(silent) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(silent, $0, length) } }
        _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(silent, $0, &length) } }
        #expect(listen(silent, 4) == 0)
        let port = Int(UInt16(bigEndian: address.sin_port))
        let smtp = try SMTPTransport(settings: .init(url: "smtp://127.0.0.1:\(port)", connectTimeout: .seconds(1), totalTimeout: .seconds(1)))
        let start = ContinuousClock.now
        let outcome = smtp.send(try .sample())
        #expect(ContinuousClock.now - start < .seconds(5))
        guard case .temporary(code: 0, _) = outcome else {
            Issue.record("a relay that never answers gave \(outcome)")
            return
        }
    }

    @Test func settingsNeverShowThePassword() {
        let settings = SMTPTransport.Settings(url: "smtps://relay:465", username: "inbox", password: "hunter2-secret")
        #expect(!"\(settings)".contains("hunter2") && "\(settings)".contains("password set"))
    }

    @Test func manyThreadsCanSendThroughOneTransport() async throws {
        let mock = try SMTPMock.start(.startTLS, user: "inbox", password: "pw")
        defer { mock.stop() }
        let smtp = try transport(mock, username: "inbox", password: "pw")
        let outcomes = await withTaskGroup(of: MailOutcome.self) { group in
            for index in 0..<12 {
                group.addTask { (try? smtp.send(.sample(to: "person\(index)@example.com"))) ?? .permanent(code: 0, text: "no sample") }
            }
            return await group.reduce(into: []) { $0.append($1) }
        }
        #expect(outcomes.allSatisfy { $0 == .sent }, "\(outcomes)")
        let recipients = try mock.received().flatMap(\.recipients).sorted()
        #expect(recipients == (0..<12).map { "person\($0)@example.com" }.sorted())
    }

    @Test func onlySMTPURLsAreAccepted() {
        for url in ["http://relay:25", "smtp://", "smtp://user:pw@relay:587", "file:///etc/passwd", "smtps://relay?x=1", "relay:25"] {
            #expect(throws: MailError.self, "\(url)") { try SMTPTransport(settings: .init(url: url)) }
        }
        #expect(throws: Never.self) { try SMTPTransport(settings: .init(url: "smtp://relay.example.com:587/wristler.eu")) }
    }

    @Test func classificationOfRepliesAndFailures() {
        #expect(SMTPTransport.classify(succeeded: true, reply: 250, replyText: "ok", curlText: "") == .sent)
        #expect(SMTPTransport.classify(succeeded: false, reply: 452, replyText: "4.2.2 mailbox full", curlText: "RCPT failed") == .temporary(code: 452, text: "4.2.2 mailbox full"))
        #expect(SMTPTransport.classify(succeeded: false, reply: 552, replyText: "5.3.4 too big", curlText: "") == .permanent(code: 552, text: "5.3.4 too big"))
        #expect(SMTPTransport.classify(succeeded: false, reply: 535, replyText: "bad credentials", curlText: "") == .temporary(code: 535, text: "bad credentials"))
        #expect(SMTPTransport.classify(succeeded: false, reply: 530, replyText: nil, curlText: "Auth required") == .temporary(code: 530, text: "Auth required"))
        #expect(SMTPTransport.classify(succeeded: false, reply: 250, replyText: "ok", curlText: "Timeout") == .temporary(code: 0, text: "Timeout"))
        #expect(SMTPTransport.classify(succeeded: false, reply: 0, replyText: nil, curlText: "Couldn't connect") == .temporary(code: 0, text: "Couldn't connect"))
    }
}
