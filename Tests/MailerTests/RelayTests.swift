import EventLog
import Foundation
import InboxDomain
import InboxTesting
import Mail
import MailTesting
import PostgresClient
import Testing

@testable import Mailer

/// The gathered mail through a real SMTP relay (Tests/MailMocks/smtp_mock.py on Debian's
/// python3-aiosmtpd, in plain mode: it answers 451 to recipients starting with `temp` and 550 to
/// those starting with `perm`).
@Suite struct RelayTests {
    static func relayMailer(_ mock: SMTPMock, _ clock: MovedClock, maximumAttempts: Int = 10) throws -> MailSender {
        let transport = try SMTPTransport(
            settings: .init(url: mock.url, username: nil, password: nil, caFile: nil, allowPlain: true, connectTimeout: .seconds(5), totalTimeout: .seconds(20)))
        return MailSender(
            store: MailOutboxStore(settings: .init(maximumAttempts: maximumAttempts)), transport: transport, from: sender,
            links: MailRenderer.Links(signer: signer, publicURL: "https://inbox.example.com"), now: { clock.now })
    }

    @Test func theMailReachesTheRelayOnceInDutchWithItsHeaders() async throws {
        let mock = try SMTPMock.start(.plain)
        defer { mock.stop() }
        try await withTestDatabase { db in
            try await db.setContact("nl-1", "noor@example.com", .nl)
            try await db.appendAndProject([PasswordChanged(personId: "nl-1")])
            let clock = MovedClock(start)
            let mailer = try Self.relayMailer(mock, clock)
            #expect(try await db.round(mailer).outcomes == ["nl-1": .sent], "mock log: \(mock.log)")
            clock.advance(2 * hour)
            #expect(try await db.round(mailer).outcomes.isEmpty)
            let received = try mock.received()
            try #require(received.count == 1)
            #expect(received[0].recipients == ["noor@example.com"] && received[0].mailFrom == "notifications@wristler.example")
            let mail = try ParsedMail.parse(received[0].bytes)
            #expect(mail.defects == [])
            #expect(mail.subject == "Wristler: Je wachtwoord is gewijzigd")
            #expect(mail.parts.map(\.contentType) == ["text/plain", "text/html"])
            #expect(mail.text.contains("Dit is er gebeurd op Wristler"))
            #expect(mail.listUnsubscribe?.trimmingCharacters(in: .whitespaces).hasPrefix("<https://inbox.example.com/mail/unsubscribe?token=") == true)
            #expect(mail.listUnsubscribePost == "List-Unsubscribe=One-Click")
        }
    }

    @Test func aTemporaryRefusalIsTriedAgainAfterTheBackoffWithTheSameMessageID() async throws {
        let mock = try SMTPMock.start(.plain)
        defer { mock.stop() }
        try await withTestDatabase { db in
            try await db.setContact("t-1", "temp-1@example.com", .en)
            try await db.appendAndProject([PasswordChanged(personId: "t-1")])
            let clock = MovedClock(start)
            let mailer = try Self.relayMailer(mock, clock)
            #expect(try await db.round(mailer).outcomes == ["t-1": .retry(at: start.addingTimeInterval(60), attempts: 1)])
            let messageID = try await db.client.withConnection { connection in
                try connection.query("SELECT message_id FROM mail_people WHERE person_id = 't-1'").scalar(String.self)
            }
            clock.advance(59)
            #expect(try await db.round(mailer).outcomes.isEmpty, "the backoff has not passed")
            clock.advance(1)
            #expect(try await db.round(mailer).outcomes == ["t-1": .retry(at: start.addingTimeInterval(60 + 300), attempts: 2)])
            // The relay takes the address now (the contact changed): the queued mail goes, once.
            try await db.setContact("t-1", "fixed@example.com", .en)
            clock.set(start.addingTimeInterval(360))
            #expect(try await db.round(mailer).outcomes == ["t-1": .sent])
            let received = try mock.received()
            try #require(received.count == 1)
            #expect(received[0].recipients == ["fixed@example.com"])
            #expect(try ParsedMail.parse(received[0].bytes).messageId == messageID, "a retry keeps the Message-ID")
            let counters = try await db.mailCounters()
            #expect(counters["retried"] == 2 && counters["sent"] == 1)
        }
    }

    @Test func tooManyTemporaryRefusalsDropTheMail() async throws {
        let mock = try SMTPMock.start(.plain)
        defer { mock.stop() }
        try await withTestDatabase { db in
            try await db.setContact("t-2", "temp-2@example.com", .en)
            try await db.appendAndProject([PasswordChanged(personId: "t-2")])
            let clock = MovedClock(start)
            let mailer = try Self.relayMailer(mock, clock, maximumAttempts: 2)
            #expect(try await db.round(mailer).outcomes == ["t-2": .retry(at: start.addingTimeInterval(60), attempts: 1)])
            clock.advance(60)
            #expect(try await db.round(mailer).outcomes == ["t-2": .dropped(attempts: 2)])
            #expect(try await db.queued("t-2").isEmpty)
            let counters = try await db.mailCounters()
            #expect(counters["dropped"] == 1 && counters["dropped.attempts"] == 1)
        }
    }

    @Test func aPermanentRefusalIsDroppedAndCounted() async throws {
        let mock = try SMTPMock.start(.plain)
        defer { mock.stop() }
        try await withTestDatabase { db in
            try await db.setContact("x-1", "perm-1@example.com", .en)
            try await db.appendAndProject([PasswordChanged(personId: "x-1")])
            let clock = MovedClock(start)
            let mailer = try Self.relayMailer(mock, clock)
            #expect(try await db.round(mailer).outcomes == ["x-1": .dropped(attempts: 1)])
            clock.advance(3 * hour)
            #expect(try await db.round(mailer).outcomes.isEmpty, "not tried again")
            #expect(try mock.received().isEmpty)
            #expect(try await db.queued("x-1").isEmpty)
            let counters = try await db.mailCounters()
            #expect(counters["dropped"] == 1 && counters["dropped.permanent"] == 1 && counters["sent"] == nil)
        }
    }
}
