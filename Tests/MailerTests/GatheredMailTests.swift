import Encodings
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

/// The gathered mail through the log: events projected into the outbox, decided, claimed, mailed
/// to a folder, on a moved clock.
@Suite struct GatheredMailTests {
    static func folderMailer(_ folder: URL, _ clock: MovedClock, links: MailRenderer.Links? = nil) -> MailSender {
        MailSender(
            store: MailOutboxStore(settings: .init(gather: .seconds(3600))), transport: FolderTransport(folder: folder.path), from: sender,
            links: links, now: { clock.now })
    }

    @Test func aPersonsNotificationsArriveOnceInOneMailInTheContactsLanguage() async throws {
        let folder = try MailMocks.temporaryDirectory("mailer-folder")
        defer { try? FileManager.default.removeItem(at: folder) }
        try await withTestDatabase { db in
            try await db.setContact("p1", "anna@example.com", .de)
            try await db.appendAndProject([PasswordChanged(personId: "p1"), SignedIn(personId: "p1", signInId: "s1", platform: "web")])
            let clock = MovedClock(start)
            let mailer = Self.folderMailer(folder, clock)
            let round = try await db.round(mailer)
            #expect(round.decided.queued == 2)
            #expect(round.outcomes == ["p1": .sent])
            let sent = try mails(in: folder)
            try #require(sent.count == 1)
            let mail = sent[0]
            #expect(mail.defects == [])
            #expect(mail.toAddress == "anna@example.com")
            #expect(mail.subject == "Wristler: 2 neue Mitteilungen")
            #expect(mail.text.contains("Dein Passwort wurde geändert") && mail.text.contains("Neue Anmeldung bei deinem Konto"), "\(mail.text)")
            #expect(mail.html.contains("<strong>Dein Passwort wurde geändert</strong>"), "\(mail.html)")
            #expect(mail.text.contains("UTC"))
            #expect(mail.listUnsubscribe == nil, "no INBOX_PUBLIC_URL: no link")
            // Again, and an hour later: nothing more.
            #expect(try await db.round(mailer).outcomes.isEmpty)
            clock.advance(2 * hour)
            #expect(try await db.round(mailer).outcomes.isEmpty)
            #expect(try mails(in: folder).count == 1)
            let counters = try await db.mailCounters()
            #expect(counters["sent"] == 1 && counters["notifications_sent"] == 2)
            #expect(try await db.queued("p1").isEmpty)
        }
    }

    @Test func withAPublicURLEachCategoryHasALinkAndTheOneClickHeaderTurnsThemAllOff() async throws {
        let folder = try MailMocks.temporaryDirectory("mailer-folder")
        defer { try? FileManager.default.removeItem(at: folder) }
        try await withTestDatabase { db in
            try await db.setContact("b-links", "ben@example.com", .nl)
            try await db.appendAndProject([
                ConversationStarted(conversationId: "c-links", kind: .watch, buyerId: "b-links", shopId: "s-links", watchId: "w-links", orderId: nil),
                MessageSent(conversationId: "c-links", messageId: "m-1", authorSide: .seller, authorId: "seller-1", body: "Yes, it is."),
                PasswordChanged(personId: "b-links"),
            ])
            let clock = MovedClock(start)
            let links = MailRenderer.Links(signer: signer, publicURL: "https://inbox.example.com/")
            #expect(try await db.round(Self.folderMailer(folder, clock, links: links)).outcomes == ["b-links": .sent])
            let mail = try #require(try mails(in: folder).first)
            #expect(mail.subject == "Wristler: 2 nieuwe meldingen")
            #expect(mail.text.contains("Nieuw bericht") && mail.text.contains("Je wachtwoord is gewijzigd"), "\(mail.text)")
            #expect(mail.listUnsubscribePost == "List-Unsubscribe=One-Click")
            // Folded onto a line of its own (too long for the first): unfolded, it starts with a space.
            let header = try #require(mail.listUnsubscribe).trimmingCharacters(in: .whitespaces)
            let prefix = "<https://inbox.example.com/mail/unsubscribe?token="
            #expect(header.hasPrefix(prefix) && header.hasSuffix(">"), "\(header)")
            let token = String(header.dropFirst(prefix.count).dropLast())
            guard case .success(let unsubscribe) = signer.verify(token) else {
                Issue.record("the header's token does not verify: \(header)")
                return
            }
            #expect(unsubscribe.personId == "b-links" && unsubscribe.category == "messages.security")
            // The footer: one link per category, in Dutch.
            #expect(mail.text.components(separatedBy: "Afmelden: https://inbox.example.com/mail/unsubscribe?token=").count == 3, "\(mail.text)")
            #expect(mail.html.components(separatedBy: "<a href=\"https://inbox.example.com/mail/unsubscribe?token=").count == 3)
        }
    }

    @Test func anHTTPPublicURLKeepsTheFooterLinksButNoListUnsubscribe() throws {
        let contact = Contact(personId: "p", address: try MailAddress("p@example.com"), language: .fr)
        let item = MailOutboxStore.Item(outboxId: 1, kind: .passwordChanged, ids: "{}", happenedAt: start)
        let message = try MailRenderer.render(
            [item], to: contact, from: sender, links: .init(signer: signer, publicURL: "http://localhost:8080"), messageID: nil, date: start)
        #expect(message.unsubscribeURL == nil)
        #expect(message.subject == "Wristler: Votre mot de passe a été modifié")
        #expect(message.textBody.contains("Se désabonner: http://localhost:8080/mail/unsubscribe?token="))
        #expect(HTML.escape("<b>\"Tom\" & 'Jerry'</b>") == "&lt;b&gt;&quot;Tom&quot; &amp; &#39;Jerry&#39;&lt;/b&gt;")
    }

    @Test func aFloodOfNotificationsListsFiftyAndCountsTheRest() throws {
        let contact = Contact(personId: "p", address: try MailAddress("p@example.com"), language: .de)
        let items = (0..<(MailRenderer.listed + 7)).map {
            MailOutboxStore.Item(outboxId: Int64($0), kind: .passwordChanged, ids: "{}", happenedAt: start)
        }
        let message = try MailRenderer.render(items, to: contact, from: sender, links: nil, messageID: nil, date: start)
        #expect(message.subject == "Wristler: \(MailRenderer.listed + 7) neue Mitteilungen")
        #expect(message.textBody.components(separatedBy: "\n- ").count - 1 == MailRenderer.listed)
        #expect(message.htmlBody.components(separatedBy: "<li>").count - 1 == MailRenderer.listed)
        #expect(message.textBody.contains("… und 7 weitere."))
        #expect(message.htmlBody.contains("… und 7 weitere."))
    }

    @Test func aMailTakesAThousandNotificationsAtMostAndTheRestWaitForTheNext() async throws {
        let folder = try MailMocks.temporaryDirectory("mailer-folder")
        defer { try? FileManager.default.removeItem(at: folder) }
        try await withTestDatabase { db in
            try await InboxProjections.prepareLiveTables(client: db.client)
            try await db.setContact("p-flood", "flood@example.com", .de)
            let flood = MailOutboxStore.itemsPerMail + 3
            try await db.client.withConnection { connection in
                _ = try connection.query(
                    """
                    INSERT INTO mail_queue (person_id, stream, outbox_id, category, event, ids, happened_at)
                    SELECT 'p-flood', 'notifications', g, 'security', 'password_changed', '{}', $1::timestamptz + g * interval '1 millisecond'
                    FROM generate_series(1, $2) AS g
                    """, start, Int64(flood))
                _ = try connection.query("INSERT INTO mail_people (person_id, stream, due_at, next_allowed_at) VALUES ('p-flood', 'notifications', $1, $1)", start)
            }
            let clock = MovedClock(start)
            let round = try await db.round(Self.folderMailer(folder, clock))
            #expect(round.outcomes == ["p-flood": .sent])
            let sent = try mails(in: folder)
            #expect(sent.count == 1)
            #expect(sent.first?.text.contains("… und \(MailOutboxStore.itemsPerMail - MailRenderer.listed) weitere.") == true)
            // The three newest wait for the next mail.
            #expect(try await db.queued("p-flood").count == 3)
        }
    }

    @Test func aCategoryWhoseMailIsOffIsNotMailed() async throws {
        let folder = try MailMocks.temporaryDirectory("mailer-folder")
        defer { try? FileManager.default.removeItem(at: folder) }
        try await withTestDatabase { db in
            try await db.setContact("p-off", "off@example.com", .en)
            try await db.setContact("p-on", "on@example.com", .en)
            try await db.appendAndProject([
                NotificationPreferenceChanged(personId: "p-off", category: .security, channel: .email, enabled: false),
                NotificationPreferenceChanged(personId: "p-on", category: .security, channel: .push, enabled: false),
                PasswordChanged(personId: "p-off"), PasswordChanged(personId: "p-on"),
            ])
            let round = try await db.round(Self.folderMailer(folder, MovedClock(start)))
            #expect(round.decided.entries == 2 && round.decided.queued == 1)
            #expect(round.outcomes == ["p-on": .sent], "push off does not turn mail off")
            #expect(try mails(in: folder).map(\.toAddress) == ["on@example.com"])
            #expect(try await db.queued("p-off").isEmpty)
        }
    }

    /// News older than `staleAfter` (a week by default) when it is decided is taken and counted,
    /// not mailed: by its event's age (a projector that caught up on an old log enqueued it now),
    /// or by its outbox row's (a mailer that was down for a week), whichever is older.
    @Test func newsOlderThanAWeekWhenDecidedIsCountedNotMailed() async throws {
        let folder = try MailMocks.temporaryDirectory("mailer-folder")
        defer { try? FileManager.default.removeItem(at: folder) }
        try await withTestDatabase { db in
            for person in ["p-old-event", "p-old-row", "p-new"] { try await db.setContact(person, "\(person)@example.com", .en) }
            try await db.appendAndProject([PasswordChanged(personId: "p-old-event"), PasswordChanged(personId: "p-old-row"), PasswordChanged(personId: "p-new")])
            try await db.client.withConnection { connection in
                // The clock below is about a day ahead: 7 days back makes about 8 days of age.
                try connection.execute("UPDATE notification_outbox SET created_at = created_at - interval '7 days' WHERE recipient_id = 'p-old-event'")
                try connection.execute("UPDATE notification_outbox SET enqueued_at = enqueued_at - interval '7 days' WHERE recipient_id = 'p-old-row'")
            }
            let round = try await db.round(Self.folderMailer(folder, MovedClock(start)))
            #expect(round.decided.entries == 3 && round.decided.queued == 1)
            #expect(round.outcomes == ["p-new": .sent])
            #expect(try mails(in: folder).map(\.toAddress) == ["p-new@example.com"])
            #expect(try await db.mailCounters()["skipped.stale"] == 2)
            #expect(try await db.queued("p-old-event").isEmpty)
            #expect(try await db.queued("p-old-row").isEmpty)
        }
    }

    @Test func withoutAContactAtSendTimeTheMailIsDroppedAndCounted() async throws {
        let folder = try MailMocks.temporaryDirectory("mailer-folder")
        defer { try? FileManager.default.removeItem(at: folder) }
        try await withTestDatabase { db in
            try await db.setContact("p-gone", "gone@example.com", .en)
            try await db.appendAndProject([PasswordChanged(personId: "p-gone"), PasswordChanged(personId: "p-never")])
            let clock = MovedClock(start)
            let mailer = Self.folderMailer(folder, clock)
            // Decided while the contact existed, deleted before the mail went.
            let decided = try await db.client.withConnection { try mailer.store.decide(limit: 10, now: clock.now, on: $0) }
            #expect(decided.queued == 2)
            try await db.client.withConnection { _ = try Contacts.delete(personId: "p-gone", on: $0) }
            let round = try await db.round(mailer)
            #expect(round.outcomes == ["p-gone": .noContact, "p-never": .noContact])
            #expect(try mails(in: folder).isEmpty)
            #expect(try await db.mailCounters()["no_contact"] == 2)
            #expect(try await db.queued("p-gone").isEmpty)
            #expect(try await db.queued("p-never").isEmpty)
        }
    }

    @Test func aSecondNotificationWithinTheHourWaitsForTheNextMail() async throws {
        let folder = try MailMocks.temporaryDirectory("mailer-folder")
        defer { try? FileManager.default.removeItem(at: folder) }
        try await withTestDatabase { db in
            try await db.setContact("p2", "pat@example.com", .en)
            let clock = MovedClock(start)
            let mailer = Self.folderMailer(folder, clock)
            try await db.appendAndProject([PasswordChanged(personId: "p2")])
            #expect(try await db.round(mailer).outcomes == ["p2": .sent])
            clock.advance(600)
            try await db.appendAndProject([SignedIn(personId: "p2", signInId: "s2", platform: "web")])
            #expect(try await db.round(mailer).outcomes.isEmpty, "10 minutes after the first mail")
            #expect(try await db.queued("p2") == ["new_sign_in"])
            clock.set(start.addingTimeInterval(hour - 1))
            #expect(try await db.round(mailer).outcomes.isEmpty, "a second before the hour")
            clock.set(start.addingTimeInterval(hour))
            #expect(try await db.round(mailer).outcomes == ["p2": .sent], "at the hour")
            let sent = try mails(in: folder)
            try #require(sent.count == 2)
            #expect(sent[1].subject == "Wristler: New sign-in to your account")
            #expect(!sent[1].text.contains("Your password was changed"), "the first mail's item is not mailed again")
        }
    }

    @Test func twoMailersAtOnceSendEachMailOnce() async throws {
        let folder = try MailMocks.temporaryDirectory("mailer-folder")
        defer { try? FileManager.default.removeItem(at: folder) }
        try await withTestDatabase { db in
            let people = (1...20).map { "crowd-\($0)" }
            for person in people { try await db.setContact(person, "\(person)@example.com", .en) }
            try await db.appendAndProject(people.map { PasswordChanged(personId: $0) })
            let clock = MovedClock(start)
            let mailers = (0..<2).map { _ in
                MailSender(
                    store: MailOutboxStore(), transport: SlowTransport(inner: FolderTransport(folder: folder.path)), from: sender, links: nil,
                    now: { clock.now })
            }
            let rounds = try await withThrowingTaskGroup(of: [String].self) { group in
                for mailer in mailers {
                    group.addTask {
                        var sent: [String] = []
                        for _ in 0..<10 {
                            let round = try await db.round(mailer, limit: 3)
                            sent += round.outcomes.filter { $0.value == .sent }.map(\.key)
                        }
                        return sent
                    }
                }
                return try await group.reduce(into: [[String]]()) { $0.append($1) }
            }
            #expect(rounds.flatMap { $0 }.sorted() == people.sorted(), "each person once")
            // Both mailers sent some of them: they ran at once rather than one after the other.
            #expect(rounds.allSatisfy { !$0.isEmpty }, "\(rounds)")
            #expect(try mails(in: folder).map(\.toAddress).sorted() == people.map { "\($0)@example.com" }.sorted())
        }
    }

    @Test func aPersonClaimedByOneMailerIsNotClaimedByAnotherUntilTheClaimRunsOut() async throws {
        try await withTestDatabase { db in
            try await db.appendAndProject([PasswordChanged(personId: "held")])
            let store = MailOutboxStore(settings: .init(claimFor: .seconds(300)))
            let first = try await db.client.withConnection { connection in
                _ = try store.decide(limit: 10, now: start, on: connection)
                return try store.claim(now: start, limit: 10, on: connection)
            }
            #expect(first.map(\.personId) == ["held"])
            #expect(try await db.client.withConnection { try store.claim(now: start.addingTimeInterval(299), limit: 10, on: $0) }.isEmpty)
            // The first mailer died: after its claim another takes the person over, and the first can no longer record.
            let second = try await db.client.withConnection { try store.claim(now: start.addingTimeInterval(300), limit: 10, on: $0) }
            #expect(second.map(\.personId) == ["held"] && second.first?.claim != first.first?.claim)
            // The mail sent again is the same message: a relay and a mail client see one.
            #expect(second[0].messageID(domain: "wristler.example") == first[0].messageID(domain: "wristler.example"))
            #expect(first[0].messageID(domain: "wristler.example").hasSuffix("@wristler.example>"))
            var other = second[0]
            other.items.append(.init(outboxId: 999_999, kind: .newSignIn, ids: "{}", happenedAt: start))
            #expect(other.messageID(domain: "wristler.example") != first[0].messageID(domain: "wristler.example"), "another mail, another id")
            let late = try await db.client.withConnection { try store.record(first[0], .sent(messageID: "<a@b.example>"), now: start.addingTimeInterval(301), on: $0) }
            #expect(late == .claimLost)
            #expect(try await db.queued("held") == ["password_changed"], "nothing recorded by the late mailer")
            #expect(try await db.client.withConnection { try MailOutboxStore.counters(on: $0) }["sent"] == nil, "nor counted")
            let recorded = try await db.client.withConnection { try store.record(second[0], .noContact, now: start.addingTimeInterval(301), on: $0) }
            #expect(recorded == .noContact)
        }
    }

    @Test func aReplayAndACatchUpMailNothingAgain() async throws {
        let folder = try MailMocks.temporaryDirectory("mailer-folder")
        defer { try? FileManager.default.removeItem(at: folder) }
        try await withTestDatabase { db in
            try await db.setContact("p3", "replay@example.com", .en)
            try await db.appendAndProject([PasswordChanged(personId: "p3")])
            let clock = MovedClock(start)
            let mailer = Self.folderMailer(folder, clock)
            #expect(try await db.round(mailer).outcomes == ["p3": .sent])
            try await db.withProjectors {
                let replayer = Replayer(client: db.client, projections: [BellProjection()])
                try await replayer.prepare()
                try await replayer.catchUp()
                try await replayer.swap()
                // A catch-up from an old checkpoint: the bell projector reads the whole log again.
                try await db.client.withConnection { connection in
                    _ = try connection.query("UPDATE projection_checkpoints SET transaction_id = '0', position = 0 WHERE projection = 'bell'")
                }
                _ = try await db.store.append([try NewEvent(catalogueEvent: SignedIn(personId: "nobody", signInId: "s9", platform: "web"))])
                try await db.waitUntilProjected()
            }
            clock.advance(3 * hour)
            let round = try await db.round(mailer)
            #expect(round.decided.entries == 1, "only the new event's notification")
            #expect(round.outcomes == ["nobody": .noContact])
            #expect(try mails(in: folder).count == 1)
            #expect(try await db.mailCounters()["sent"] == 1)
        }
    }

    @Test func theServiceMailsWhatTheProjectorsEnqueue() async throws {
        let folder = try MailMocks.temporaryDirectory("mailer-folder")
        defer { try? FileManager.default.removeItem(at: folder) }
        try await withTestDatabase { db in
            try await db.setContact("p4", "service@example.com", .fr)
            let service = MailService(
                configuration: db.configuration, transport: FolderTransport(folder: folder.path), from: sender, links: nil,
                options: .init(pollInterval: .seconds(30)))
            let task = Task { try await service.run() }
            defer { task.cancel() }
            try await db.appendAndProject([PasswordChanged(personId: "p4")])
            // Woken by the outbox's NOTIFY: well before the 30-second poll.
            let deadline = ContinuousClock.now + .seconds(20)
            while try mails(in: folder).isEmpty && ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(50)) }
            let sent = try mails(in: folder)
            #expect(sent.count == 1)
            #expect(sent.first?.subject == "Wristler: Votre mot de passe a été modifié")
            task.cancel()
            _ = await task.result
        }
    }
}

/// The service's loops (`MailService.Options.workers`, `INBOX_MAIL_WORKERS`) mail at once, each
/// person once.
@Suite struct MailWorkersTests {
    @Test func theServicesLoopsMailAtOnceAndEachPersonOnce() async throws {
        let folder = try MailMocks.temporaryDirectory("mailer-folder")
        defer { try? FileManager.default.removeItem(at: folder) }
        try await withTestDatabase { db in
            let people = (1...24).map { "worker-\($0)" }
            for person in people { try await db.setContact(person, "\(person)@example.com", .en) }
            let transport = OverlapTransport(inner: FolderTransport(folder: folder.path))
            let service = MailService(
                configuration: db.configuration, transport: transport, from: sender, links: nil,
                options: .init(batchSize: 4, pollInterval: .seconds(30), workers: 3))
            let task = Task { try await service.run() }
            defer { task.cancel() }
            try await db.appendAndProject(people.map { PasswordChanged(personId: $0) })
            let deadline = ContinuousClock.now + .seconds(30)
            while try mails(in: folder).count < people.count && ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(50)) }
            // A moment more: a mail sent twice would show now.
            try await Task.sleep(for: .milliseconds(300))
            task.cancel()
            _ = await task.result
            #expect(try mails(in: folder).map(\.toAddress).sorted() == people.map { "\($0)@example.com" }.sorted(), "each person once")
            #expect(transport.mostAtOnce > 1, "the loops sent at the same time")
            #expect(try await db.mailCounters()["sent"] == Int64(people.count))
        }
    }
}

/// Sends through `inner` slowly, and remembers how many sends were under way at once at most.
final class OverlapTransport: MailTransport, @unchecked Sendable {
    let inner: any MailTransport
    private let lock = NSLock()
    private var underWay = 0
    private var most = 0

    init(inner: any MailTransport) { self.inner = inner }

    var mostAtOnce: Int { lock.withLock { most } }

    func send(_ message: MailMessage) -> MailOutcome {
        lock.withLock {
            underWay += 1
            most = max(most, underWay)
        }
        defer { lock.withLock { underWay -= 1 } }
        usleep(30_000)
        return inner.send(message)
    }
}

/// `MailOutboxStore.status`, as `inbox status` and /metrics read it.
@Suite struct MailStatusTests {
    @Test func theStatusCountsWhatWaitsAndWhatWasSent() async throws {
        try await withTestDatabase { db in
            try await db.appendAndProject([PasswordChanged(personId: "s1"), PasswordChanged(personId: "s2")])
            var status = try await db.client.withConnection { try MailOutboxStore.status(on: $0) }
            #expect(status.undecided == 2 && status.queued == 0 && status.peopleWaiting == 0)
            let clock = MovedClock(start)
            let store = MailOutboxStore()
            _ = try await db.client.withConnection { try store.decide(limit: 10, now: clock.now, on: $0) }
            status = try await db.client.withConnection { try MailOutboxStore.status(on: $0) }
            #expect(status.undecided == 0 && status.queued == 2 && status.peopleWaiting == 2)
            #expect(status.counters["queued"] == 2)
        }
    }
}

/// A transport that takes `seconds` of the moved clock per mail: a slow relay, without waiting.
struct ClockTakingTransport: MailTransport {
    let inner: any MailTransport
    let clock: MovedClock
    let seconds: TimeInterval
    func send(_ message: MailMessage) -> MailOutcome {
        clock.advance(seconds)
        return inner.send(message)
    }
}

@Suite struct SlowRelayTests {
    @Test func aRoundStopsSendingAtHalfTheClaimAndLetsTheRestGo() async throws {
        let folder = try MailMocks.temporaryDirectory("mailer-folder")
        defer { try? FileManager.default.removeItem(at: folder) }
        try await withTestDatabase { db in
            for person in ["slow-1", "slow-2", "slow-3"] { try await db.setContact(person, "\(person)@example.com", .en) }
            try await db.appendAndProject([PasswordChanged(personId: "slow-1"), PasswordChanged(personId: "slow-2"), PasswordChanged(personId: "slow-3")])
            let clock = MovedClock(start)
            let mailer = MailSender(
                store: MailOutboxStore(settings: .init(claimFor: .seconds(300))),
                transport: ClockTakingTransport(inner: FolderTransport(folder: folder.path), clock: clock, seconds: 100), from: sender, links: nil,
                now: { clock.now })
            let first = try await db.round(mailer)
            #expect(first.claimed == 3)
            #expect(first.outcomes == ["slow-1": .sent, "slow-2": .sent], "the third would start after half the claim")
            // Let go at once: the next round (any mailer's) takes it, though its claim had not run out.
            let second = try await db.round(mailer)
            #expect(second.outcomes == ["slow-3": .sent])
            #expect(try mails(in: folder).count == 3)
        }
    }
}

@Suite struct SwitchedOffWhileWaitingTests {
    @Test func aCategoryTurnedOffWhileItsNotificationWaitedIsLeftOutOfTheMail() async throws {
        let folder = try MailMocks.temporaryDirectory("mailer-folder")
        defer { try? FileManager.default.removeItem(at: folder) }
        try await withTestDatabase { db in
            try await db.setContact("b-wait", "wait@example.com", .en)
            try await db.setContact("only-security", "only@example.com", .en)
            try await db.appendAndProject([
                ConversationStarted(conversationId: "c-wait", kind: .watch, buyerId: "b-wait", shopId: "s-wait", watchId: "w-wait", orderId: nil),
                MessageSent(conversationId: "c-wait", messageId: "m-1", authorSide: .seller, authorId: "seller-1", body: "Yes."),
                PasswordChanged(personId: "b-wait"), PasswordChanged(personId: "only-security"),
            ])
            let clock = MovedClock(start)
            let mailer = GatheredMailTests.folderMailer(folder, clock)
            #expect(try await db.client.withConnection { try mailer.store.decide(limit: 10, now: clock.now, on: $0) }.queued == 3)
            try await db.appendAndProject([
                NotificationPreferenceChanged(personId: "b-wait", category: .security, channel: .email, enabled: false),
                NotificationPreferenceChanged(personId: "only-security", category: .security, channel: .email, enabled: false),
            ])
            let round = try await db.round(mailer)
            #expect(round.outcomes == ["b-wait": .sent])
            let sent = try mails(in: folder)
            try #require(sent.count == 1)
            #expect(sent[0].subject == "Wristler: New message")
            #expect(!sent[0].text.contains("Your password was changed"))
            #expect(try await db.queued("only-security").isEmpty)
            #expect(try await db.mailCounters()["switched_off"] == 2)
            clock.advance(2 * hour)
            #expect(try await db.round(mailer).outcomes.isEmpty)
        }
    }
}
