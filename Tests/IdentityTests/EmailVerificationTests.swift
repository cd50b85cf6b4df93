import EventLog
import Foundation
import Identity
import InboxAPI
import InboxDomain
import InboxTesting
import Mail
import MailTesting
import Mailer
import PostgresClient
import Testing

/// A change of address through real sockets and a real SMTP relay (the aiosmtpd mock): nothing
/// changes until the link of the mail sent to the new address is followed; links work once, die
/// when a newer one is sent, and the mails are limited per account.
@Suite(.serialized) struct EmailVerificationTests {
    static let from = try! MailAddress("accounts@wristler.example")

    static func withRoutes(_ body: (IdentityHarness, SMTPMock, MailSender) async throws -> Void) async throws {
        let mock = try SMTPMock.start(.plain)
        defer { mock.stop() }
        let transport = try SMTPTransport(
            settings: .init(url: mock.url, username: nil, password: nil, caFile: nil, allowPlain: true, connectTimeout: .seconds(5), totalTimeout: .seconds(20)))
        let mailer = MailSender(store: MailOutboxStore(), transport: transport, from: from, links: nil)
        try await IdentityHarness.with(
            socialRoutes: { pool, _ in
                let verification = EmailVerification(publicURL: "https://api.wristler.test")
                return MeRoutes.routes(client: pool, verification: verification)
                    + verification.routes(client: pool, validator: EventValidator(registry: InboxCatalogue.registry))
            }, { identity in try await body(identity, mock, mailer) })
    }

    /// Runs the mailer once; the mails the relay received since `seen`.
    static func mailed(_ identity: IdentityHarness, _ mock: SMTPMock, _ mailer: MailSender, after seen: Int) async throws -> [(to: [String], mail: ParsedMail)] {
        let round = try await identity.db.client.withConnection { connection in try mailer.round(limit: 10, on: connection) }
        #expect(round.transactional.retried == 0 && round.transactional.dropped == 0, "\(round.transactional)")
        return try mock.received().dropFirst(seen).map { ($0.recipients, try ParsedMail.parse($0.bytes)) }
    }

    static func link(in mail: ParsedMail) throws -> String {
        let text = try #require(mail.parts.first { $0.contentType == "text/plain" }?.content)
        let line = try #require(text.split(whereSeparator: \.isNewline).first { $0.hasPrefix("https://api.wristler.test/mail/verify?token=") })
        return String(line.dropFirst("https://api.wristler.test".count))
    }

    static func me(_ identity: IdentityHarness, _ headers: [String: String]) async throws -> [String: Any] {
        let me = try await identity.send("GET", "/v1/me", headers: headers)
        #expect(me.status == 200, "\(me)")
        return (me.json["data"] as? [String: Any])?["attributes"] as? [String: Any] ?? [:]
    }

    @Test func aNewAddressCountsOnlyOnceItsLinkIsFollowedAndTheLinkWorksOnce() async throws {
        try await Self.withRoutes { identity, mock, mailer in
            let anna = try await identity.account("anna@example.com")
            try await identity.account("bert@example.com")
            try await identity.db.client.withConnection { connection in
                _ = try Contacts.set(personId: anna.personId, address: try MailAddress("anna@example.com"), language: .nl, on: connection)
            }
            let (token, _) = try await MeRoutesTests.signIn(identity, "anna@example.com", scope: "account:write account-security:write")
            let headers = MeRoutesTests.headers(token)

            // Refused: not an address, another account's (in any letter case).
            let bad = try await identity.send("PATCH", "/v1/me", headers: headers, body: MeRoutesTests.patch(#""email":"not an address""#))
            #expect(bad.status == 422 && bad.text.contains("/data/attributes/email"), "\(bad)")
            let taken = try await identity.send("PATCH", "/v1/me", headers: headers, body: MeRoutesTests.patch(#""email":"Bert@Example.com""#))
            #expect(taken.status == 409 && taken.text.contains("email_taken"), "\(taken)")

            let changed = try await identity.send("PATCH", "/v1/me", headers: headers, body: MeRoutesTests.patch(#""email":"anna.new@example.com""#))
            #expect(changed.status == 200, "\(changed)")
            var me = try await Self.me(identity, headers)
            #expect(me["email"] as? String == "anna@example.com", "nothing changes before the link")
            #expect((me["emailChange"] as? [String: Any])?["email"] as? String == "anna.new@example.com")

            // The mail goes to the new address, in Dutch, with the link.
            let mails = try await Self.mailed(identity, mock, mailer, after: 0)
            try #require(mails.count == 1)
            #expect(mails[0].to == ["anna.new@example.com"] && mails[0].mail.subject.contains("bevestig"), "\(mails[0].mail.subject)")
            let link = try Self.link(in: mails[0].mail)
            #expect(try await identity.db.scalar("SELECT count(*)::int FROM mail_transactional", Int.self) == 0, "sent, and its secret gone")

            // Opening the link changes nothing; its button does.
            let page = try await identity.send("GET", link)
            #expect(page.status == 200 && page.text.contains("anna.new@example.com") && page.text.contains("method=\"post\""), "\(page)")
            #expect(try await Self.me(identity, headers)["email"] as? String == "anna@example.com")
            let verified = try await identity.send("POST", link)
            #expect(verified.status == 200, "\(verified)")
            me = try await Self.me(identity, headers)
            #expect(me["email"] as? String == "anna.new@example.com" && me["emailVerified"] as? Bool == true && me["emailChange"] is NSNull)
            let contact = try await identity.db.scalar("SELECT address FROM contacts WHERE person_id = '\(anna.personId)'", String.self)
            #expect(contact == "anna.new@example.com", "mail follows the address")
            #expect(try await identity.password("anna.new@example.com", "correct horse battery").status == 200)
            #expect(try await identity.db.scalar("SELECT count(*)::int FROM events WHERE type = 'email_changed'", Int.self) == 1)

            // Once only; and nothing waits any more.
            #expect(try await identity.send("POST", link).status == 400)
            let resend = try await identity.send("POST", "/v1/me/email-verification", headers: headers)
            #expect(resend.status == 409 && resend.text.contains("already_verified"), "\(resend)")
        }
    }

    @Test func aNewerMailKillsTheOlderLinkAndTheMailsAreLimitedPerAccount() async throws {
        try await Self.withRoutes { identity, mock, mailer in
            try await identity.account("carl@example.com", verified: false)
            let (token, _) = try await MeRoutesTests.signIn(identity, "carl@example.com", scope: "account-security:write")
            let headers = MeRoutesTests.headers(token)
            // His own unverified address: the mail, and again.
            #expect(try await identity.send("POST", "/v1/me/email-verification", headers: headers).status == 204)
            let first = try Self.link(in: try #require(try await Self.mailed(identity, mock, mailer, after: 0).first).mail)
            #expect(try await identity.send("POST", "/v1/me/email-verification", headers: headers).status == 204)
            let second = try await Self.mailed(identity, mock, mailer, after: 1)
            try #require(second.count == 1)
            #expect(second[0].to == ["carl@example.com"] && second[0].mail.subject.contains("confirm"), "English without a contact")
            #expect(try await identity.send("POST", first).status == 400, "replaced by the newer mail")
            // Three mails an hour: the fourth is 429 with Retry-After, and nothing is queued.
            #expect(try await identity.send("POST", "/v1/me/email-verification", headers: headers).status == 204)
            let limited = try await identity.send("POST", "/v1/me/email-verification", headers: headers)
            #expect(limited.status == 429 && limited.header("Retry-After") != nil, "\(limited)")
            let third = try await Self.mailed(identity, mock, mailer, after: 2)
            #expect(third.count == 1)
            #expect(try await identity.send("POST", try Self.link(in: third[0].mail)).status == 200)
            let verified = try await identity.db.scalar("SELECT email_verified FROM identity_accounts WHERE email = 'carl@example.com'", Bool.self)
            #expect(verified)
            #expect(try await identity.db.scalar("SELECT count(*)::int FROM events WHERE type = 'email_changed'", Int.self) == 0, "the address did not change")
        }
    }

    @Test func anAddressTakenBeforeTheLinkIsFollowedIsRefusedAndChangesNothing() async throws {
        try await Self.withRoutes { identity, mock, mailer in
            let dora = try await identity.account("dora@example.com")
            let (token, _) = try await MeRoutesTests.signIn(identity, "dora@example.com", scope: "account:write")
            let headers = MeRoutesTests.headers(token)
            #expect(try await identity.send("PATCH", "/v1/me", headers: headers, body: MeRoutesTests.patch(#""email":"shared@example.com""#)).status == 200)
            let link = try Self.link(in: try #require(try await Self.mailed(identity, mock, mailer, after: 0).first).mail)
            try await identity.account("shared@example.com")
            let refused = try await identity.send("POST", link)
            #expect(refused.status == 409, "\(refused)")
            #expect(try await identity.db.scalar("SELECT email FROM identity_accounts WHERE person_id = '\(dora.personId)'", String.self) == "dora@example.com")
            for bad in ["/mail/verify", "/mail/verify?token=short", "/mail/verify?token=" + String(repeating: "A", count: 43)] {
                #expect(try await identity.send("POST", bad).status == 400, "\(bad)")
                #expect(try await identity.send("GET", bad).status == 400, "\(bad)")
            }
        }
    }
}
