import EventLog
import Foundation
import InboxDomain
import InboxTesting
import Mail
import MailTesting
import PostgresClient
import Projections
import Testing

@testable import Mailer

/// The mails besides the gathered notifications (docs/mail.md, "Streams"): a saved search's
/// matches at its interval, a shop's digest of what buyers wrote, and the sold mail; through the
/// log, on a moved clock, to a folder.
@Suite struct StreamMailTests {
    static let digestWindow: TimeInterval = 3600

    static func folderMailer(_ folder: URL, _ clock: MovedClock, links: MailRenderer.Links? = nil) -> MailSender {
        MailSender(
            store: MailOutboxStore(settings: .init(gather: .seconds(3600), shopDigest: .seconds(Int64(digestWindow)))),
            transport: FolderTransport(folder: folder.path), from: sender, links: links, now: { clock.now })
    }

    static func search(_ id: String, _ name: String, _ interval: SavedSearchInterval) -> SavedSearchCreated {
        SavedSearchCreated(savedSearchId: id, personId: "p-s", name: name, query: .object(["brand": .string("x")]), interval: interval, push: true)
    }

    @Test func aSavedSearchMailsItsMatchesAtItsIntervalAndNeverNotAtAll() async throws {
        let folder = try MailMocks.temporaryDirectory("mailer-folder")
        defer { try? FileManager.default.removeItem(at: folder) }
        try await withTestDatabase { db in
            try await db.setContact("p-s", "sam@example.com", .en)
            try await db.appendAndProject([
                Self.search("s-now", "Rolex GMT", .instant), Self.search("s-day", "Omega <Speedmaster>", .daily),
                Self.search("s-off", "Seiko", .never),
                SavedSearchMatched(savedSearchId: "s-now", personId: "p-s", watchIds: ["w1", "w2"]),
                SavedSearchMatched(savedSearchId: "s-day", personId: "p-s", watchIds: ["w3"]),
                SavedSearchMatched(savedSearchId: "s-off", personId: "p-s", watchIds: ["w4"]),
            ])
            let clock = MovedClock(start)
            let mailer = Self.folderMailer(folder, clock)
            // The instant search at once; the daily one waits for its day; `never` queues nothing,
            // and a saved search's match is never in the gathered notifications.
            let first = try await db.round(mailer)
            #expect(first.decided == .init(entries: 3, queued: 2))
            #expect(first.outcomes == ["p-s search:s-now": .sent])
            var sent = try mails(in: folder)
            try #require(sent.count == 1)
            #expect(sent[0].subject == "Wristler: 2 new watches for “Rolex GMT”")
            #expect(sent[0].text.contains("New watches match your search “Rolex GMT”:") && sent[0].text.contains("- 2 new watches ("), "\(sent[0].text)")

            // Another match of the daily search within its day joins the first.
            clock.advance(hour)
            try await db.appendAndProject([SavedSearchMatched(savedSearchId: "s-day", personId: "p-s", watchIds: ["w5", "w6"])])
            #expect(try await db.round(mailer).outcomes.isEmpty)
            clock.set(start.addingTimeInterval(24 * hour - 1))
            #expect(try await db.round(mailer).outcomes.isEmpty)
            clock.set(start.addingTimeInterval(24 * hour))
            #expect(try await db.round(mailer).outcomes == ["p-s search:s-day": .sent])
            sent = try mails(in: folder)
            try #require(sent.count == 2)
            let daily = try #require(sent.first { $0.subject.contains("Omega") })
            #expect(daily.subject == "Wristler: 3 new watches for “Omega <Speedmaster>”")
            #expect(daily.text.contains("- 1 new watch (") && daily.text.contains("- 2 new watches ("), "\(daily.text)")
            #expect(daily.html.contains("“Omega &lt;Speedmaster&gt;”"), "\(daily.html)")
            clock.advance(7 * 24 * hour)
            #expect(try await db.round(mailer).outcomes.isEmpty)
            #expect(try mails(in: folder).count == 2)
            let counters = try await db.mailCounters()
            #expect(counters["sent"] == 2 && counters["notifications_sent"] == 3)
        }
    }

    @Test func aSearchDeletedOrSetToNeverWhileItsMatchesWaitMailsNothing() async throws {
        let folder = try MailMocks.temporaryDirectory("mailer-folder")
        defer { try? FileManager.default.removeItem(at: folder) }
        try await withTestDatabase { db in
            try await db.setContact("p-s", "sam@example.com", .en)
            try await db.appendAndProject([
                Self.search("s-day", "Omega", .daily), Self.search("s-week", "Tudor", .weekly),
                SavedSearchMatched(savedSearchId: "s-day", personId: "p-s", watchIds: ["w1"]),
                SavedSearchMatched(savedSearchId: "s-week", personId: "p-s", watchIds: ["w2"]),
            ])
            let clock = MovedClock(start)
            let mailer = Self.folderMailer(folder, clock)
            #expect(try await db.round(mailer).decided.queued == 2)
            try await db.appendAndProject([
                SavedSearchChanged(savedSearchId: "s-day", personId: "p-s", interval: .never),
                SavedSearchDeleted(savedSearchId: "s-week", personId: "p-s"),
            ])
            clock.advance(8 * 24 * hour)
            #expect(try await db.round(mailer).outcomes.isEmpty)
            #expect(try mails(in: folder).isEmpty)
            #expect(try await db.mailCounters()["switched_off"] == 2)
            #expect(try await db.queued("p-s").isEmpty)
        }
    }

    /// A shop `s1` with two people: `m-nl` (mail on, Dutch) and `m-off` (the shop's mail off).
    static let shop: [any CatalogueEvent] = [
        ShopMemberAdded(shopId: "s1", personId: "m-nl"), ShopMemberAdded(shopId: "s1", personId: "m-off"),
        NotificationPreferenceChanged(personId: "m-off", category: .shop, channel: .email, enabled: false),
        ConversationStarted(conversationId: "c1", kind: .watch, buyerId: "b1", shopId: "s1", watchId: "w1", orderId: nil),
        ConversationStarted(conversationId: "c2", kind: .watch, buyerId: "b2", shopId: "s1", watchId: "w2", orderId: nil),
    ]

    @Test func theShopDigestGathersWhatBuyersWroteForItsWindowLessWhatTheShopReadMeanwhile() async throws {
        let folder = try MailMocks.temporaryDirectory("mailer-folder")
        defer { try? FileManager.default.removeItem(at: folder) }
        try await withTestDatabase { db in
            for person in ["m-nl", "m-off"] { try await db.setContact(person, "\(person)@example.com", .nl) }
            let long = String(repeating: "lang ", count: 100)
            try await db.appendAndProject(
                Self.shop + [
                    MessageSent(conversationId: "c1", messageId: "m-1", authorSide: .buyer, authorId: "b1", body: "Is hij nog <beschikbaar>?"),
                    MessageSent(
                        conversationId: "c2", messageId: "m-2", authorSide: .buyer, authorId: "b2", body: "Mijn bod.",
                        offer: Money(amount: 420_000, currency: "EUR")),
                ])
            let clock = MovedClock(start)
            let mailer = Self.folderMailer(folder, clock)
            // Nothing before the window ends: the buyers wrote, nobody answered them.
            #expect(try await db.round(mailer).outcomes.isEmpty)
            clock.advance(Self.digestWindow - 1)
            try await db.appendAndProject([
                MessageSent(conversationId: "c1", messageId: "m-3", authorSide: .buyer, authorId: "b1", body: long),
                // The shop answers the offer before the digest goes: it is no longer waiting.
                MessageSent(conversationId: "c2", messageId: "m-4", authorSide: .seller, authorId: "m-off", body: "Akkoord."),
            ])
            // The answer is the buyer's own gathered mail (b2 has no contact here).
            #expect(try await db.round(mailer).outcomes == ["b2": .noContact])
            clock.set(start.addingTimeInterval(Self.digestWindow))
            let round = try await db.round(mailer)
            #expect(round.outcomes == ["m-nl shop:s1": .sent])
            let sent = try mails(in: folder)
            try #require(sent.count == 1)
            let digest = sent[0]
            #expect(digest.toAddress == "m-nl@example.com")
            #expect(digest.subject == "Wristler: 2 berichten van kopers aan je winkel")
            #expect(digest.text.contains("Kopers schreven je winkel en wachten op antwoord:"), "\(digest.text)")
            #expect(digest.text.contains("“Is hij nog <beschikbaar>?”") && !digest.text.contains("Mijn bod."), "\(digest.text)")
            #expect(digest.html.contains("“Is hij nog &lt;beschikbaar&gt;?”"), "\(digest.html)")
            // A long message is quoted in part.
            #expect(digest.text.contains(String(long.prefix(MailOutboxStore.excerptLength)) + "…"), "\(digest.text)")
            let counters = try await db.mailCounters()
            #expect(counters["already_read"] == 1)
            #expect(counters["sent"] == 1 && counters["notifications_sent"] == 2)

            // All of it read before the window ends: no digest at all.
            try await db.appendAndProject([
                MessageSent(conversationId: "c1", messageId: "m-5", authorSide: .buyer, authorId: "b1", body: "Hallo?"),
            ])
            #expect(try await db.round(mailer).outcomes.isEmpty)
            try await db.appendAndProject([ConversationRead(conversationId: "c1", side: .seller, personId: "m-off", upToMessageId: "m-5")])
            clock.advance(3 * hour)
            #expect(try await db.round(mailer).outcomes.isEmpty)
            #expect(try mails(in: folder).count == 1)
            #expect(try await db.mailCounters()["already_read"] == 2)
        }
    }

    @Test func aPaidOrderMailsEveryoneAtTheShopWhoseMailIsOnAtOnceWithTheAmount() async throws {
        let folder = try MailMocks.temporaryDirectory("mailer-folder")
        defer { try? FileManager.default.removeItem(at: folder) }
        try await withTestDatabase { db in
            try await db.setContact("m-nl", "m-nl@example.com", .de)
            try await db.setContact("m-off", "m-off@example.com", .de)
            try await db.appendAndProject(
                Self.shop + [
                    OrderPaid(orderId: "o-1", buyerId: "b1", shopId: "s1", watchId: "w1", conversationId: "c1", amount: Money(amount: 1_234_567, currency: "EUR"))
                ])
            let clock = MovedClock(start)
            let round = try await db.round(Self.folderMailer(folder, clock))
            #expect(round.outcomes == ["m-nl sold": .sent, "b1": .noContact])
            let sent = try mails(in: folder)
            try #require(sent.count == 1)
            #expect(sent[0].toAddress == "m-nl@example.com")
            #expect(sent[0].subject == "Wristler: deine Uhr wurde verkauft")
            #expect(sent[0].text.contains("- Bestellung o-1 bezahlt: 12.345,67 EUR ("), "\(sent[0].text)")
        }
    }

    @Test func aShopsMailHasTheShopsUnsubscribeLinkAndASearchsMailItsOwn() throws {
        let contact = Contact(personId: "p-s", address: try MailAddress("p@example.com"), language: .en)
        let links = MailRenderer.Links(signer: signer, publicURL: "https://inbox.example.com")
        let item = MailOutboxStore.Item(
            outboxId: 1, kind: .shopOrderPaid, ids: #"{"orderId":"o-9","amount":{"amount":500,"currency":"JPY"}}"#, happenedAt: start)
        let sold = try MailRenderer.render(
            MailOutboxStore.Claimed(personId: "p-s", stream: .sold, claim: UUID(), attempts: 0, items: [item]), to: contact,
            from: sender, links: links, date: start)
        #expect(sold.textBody.contains("Order o-9 paid: 500 JPY"), "\(sold.textBody)")
        let soldToken = try #require(sold.unsubscribeURL?.components(separatedBy: "token=").last)
        #expect(try signer.verify(soldToken).get().category == "shop")

        let match = MailOutboxStore.Item(
            outboxId: 2, kind: .savedSearchMatched, ids: #"{"savedSearchId":"s.1","watchId":"w1"}"#, happenedAt: start)
        let search = try MailRenderer.render(
            MailOutboxStore.Claimed(
                personId: "p-s", stream: .search(savedSearchId: "s.1"), claim: UUID(), attempts: 0, items: [match], searchName: "GMT"),
            to: contact, from: sender, links: links, date: start)
        #expect(search.subject == "Wristler: a new watch for “GMT”")
        let searchToken = try #require(search.unsubscribeURL?.components(separatedBy: "token=").last)
        #expect(try signer.verify(searchToken).get().category == "search:s.1")
        #expect(search.textBody.contains("Stop e-mails for this search: https://inbox.example.com/mail/unsubscribe?token="))

        // An id a token cannot carry: the mail goes without that link rather than not at all.
        let odd = try MailRenderer.render(
            MailOutboxStore.Claimed(
                personId: "p-s", stream: .search(savedSearchId: "s/1 ü"), claim: UUID(), attempts: 0, items: [match], searchName: "GMT"),
            to: contact, from: sender, links: links, date: start)
        #expect(odd.unsubscribeURL == nil)
    }

    /// A search's name comes from another tier's event, unchecked: a line break or a NUL in it,
    /// or a name of thousands of characters, still gives a mail (a subject the composer accepts).
    @Test func aSearchNameThatCouldStartAHeaderOrIsHugeStillGivesAMail() throws {
        let contact = Contact(personId: "p-s", address: try MailAddress("p@example.com"), language: .en)
        let match = MailOutboxStore.Item(
            outboxId: 1, kind: .savedSearchMatched, ids: #"{"savedSearchId":"s1","watchId":"w1"}"#, happenedAt: start)
        func subject(_ name: String) throws -> String {
            try MailRenderer.render(
                MailOutboxStore.Claimed(
                    personId: "p-s", stream: .search(savedSearchId: "s1"), claim: UUID(), attempts: 0, items: [match], searchName: name),
                to: contact, from: sender, links: nil, date: start
            ).subject
        }
        #expect(try subject("Rolex\r\nBcc: x@example.com\u{0}") == "Wristler: a new watch for “Rolex  Bcc: x@example.com ”")
        let long = try subject(String(repeating: "ab", count: 5_000))
        #expect(long == "Wristler: a new watch for “" + String(repeating: "ab", count: 50).dropLast() + "…”")
    }

    @Test func amountsAreWrittenAsEachLanguageWritesThem() {
        let amount = Money(amount: 123_456_789, currency: "EUR")
        #expect(MailRenderer.money(amount, .en) == "1,234,567.89 EUR")
        #expect(MailRenderer.money(amount, .nl) == "1.234.567,89 EUR")
        #expect(MailRenderer.money(amount, .fr) == "1\u{202F}234\u{202F}567,89 EUR")
        #expect(MailRenderer.money(Money(amount: 5, currency: "CHF"), .de) == "0,05 CHF")
        #expect(MailRenderer.money(Money(amount: 120_000, currency: "JPY"), .en) == "120,000 JPY")
        #expect(MailRenderer.money(Money(amount: -250, currency: "USD"), .en) == "-2.50 USD")
    }

    @Test func streamKeysReadBackAndAStreamIsChosenByAudienceAndEvent() {
        for stream in [MailStream.notifications, .sold, .search(savedSearchId: "a:b"), .shopDigest(shopId: "s1")] {
            #expect(MailStream(key: stream.key) == stream)
        }
        #expect(MailStream(key: "search:") == nil && MailStream(key: "other") == nil)
        #expect(MailStream.of(.shopOrderPaid, ids: ["sellerId": "s1"]) == .sold)
        #expect(MailStream.of(.shopOfferMade, ids: ["sellerId": "s1"]) == .shopDigest(shopId: "s1"))
        #expect(MailStream.of(.shopUnanswered, ids: ["sellerId": "s1"]) == nil)
        #expect(MailStream.of(.orderPaid, ids: [:]) == .notifications)
        #expect(MailStream.of(.savedSearchMatched, ids: ["savedSearchId": "q1"]) == .search(savedSearchId: "q1"))
        #expect(MailStream.of(.offerAccepted, ids: [:]) == nil, "retired: never sent")
    }
}
