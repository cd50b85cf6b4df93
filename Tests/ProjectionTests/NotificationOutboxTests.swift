import Foundation
import InboxDomain
import InboxTesting
import NotificationOutbox
import PostgresClient
import Synchronization
import Testing

/// `NotificationOutbox`: a notification goes in once, with its recipients' decisions, and comes
/// back one entry per recipient, whatever the ids hold.
@Suite struct NotificationOutboxTests {
    /// A taker's floor: a take starts above what was taken before, and an entry whose transaction
    /// committed after a later one was taken is taken all the same: at once when the queue above
    /// holds fewer than asked, at the latest `TakeFloor.wholeQueueEvery` later when it holds more.
    @Test func anEntryCommittedLateBelowTheFloorIsTakenAllTheSame() async throws {
        try await withTestDatabase { db in
            @Sendable func notification(_ n: Int) -> OutboxNotification {
                OutboxNotification(
                    notificationId: "n\(n)", kind: .newSignIn, addressee: "p\(n)", idsJSON: "{}", sourcePosition: Int64(n), happenedAt: Date(),
                    recipients: [.init(personId: "p\(n)", delivery: NotificationDelivery.decide(.newSignIn, ids: [:], facts: RecipientFacts()))])
            }
            func take(_ limit: Int, _ floor: NotificationOutbox.TakeFloor) async throws -> [String] {
                try await db.client.withConnection { try NotificationOutbox.take(.push, limit: limit, floor: floor, on: $0) }.entries.map(\.recipientId)
            }
            func enqueue(_ numbers: ClosedRange<Int>) async throws {
                let notifications = numbers.map(notification)
                try await db.client.withConnection { try NotificationOutbox.enqueue(notifications, on: $0) }
            }
            // The floor's clock moves only when the test moves it: a busy machine cannot make the
            // whole queue due early.
            let start = ContinuousClock.now
            let passed = Mutex(Duration.zero)
            let floor = NotificationOutbox.TakeFloor(now: { start + passed.withLock { $0 } })
            let late = try db.connect()
            defer { late.close() }

            // The lowest id, its transaction still open while later ones are taken.
            _ = try late.execute("BEGIN")
            try NotificationOutbox.enqueue([notification(0)], on: late)
            try await enqueue(1...3)
            #expect(try await take(2, floor) == ["p1", "p2"])
            _ = try late.execute("COMMIT")
            // Above the floor only p3, fewer than asked: the head is read too, in order.
            #expect(try await take(5, floor) == ["p0", "p3"])

            // Again, with more above the floor than a take asks for.
            _ = try late.execute("BEGIN")
            try NotificationOutbox.enqueue([notification(10)], on: late)
            try await enqueue(11...16)
            #expect(try await take(2, floor) == ["p11", "p12"])
            _ = try late.execute("COMMIT")
            #expect(try await take(2, floor) == ["p13", "p14"], "a take above the floor, not from the head")
            passed.withLock { $0 += NotificationOutbox.TakeFloor.wholeQueueEvery }
            #expect(try await take(2, floor) == ["p10", "p15"], "the whole queue, once a while has passed")
            #expect(try await take(2, floor) == ["p16"])
            #expect(try await take(2, floor) == [])
        }
    }

    @Test func whatGoesInComesBackPerRecipientOnceWithItsDecisions() async throws {
        try await withTestDatabase { db in
            let odd = ["a\"b", "c\\d", "e,f {g} NULL", ""]
            let ids = ["sellerId": "s \"1\"", "orderId": "o,1", "watchId": "Genève \u{1F570}\n\t\\u0000"]
            let shopNews = OutboxNotification(
                notificationId: "n-shop", kind: .shopOrderPaid, addressee: "s \"1\"", idsJSON: OutboxNotification.json(ids), sourcePosition: 7,
                happenedAt: Date(timeIntervalSince1970: 1_800_000_000),
                recipients: odd.enumerated().map { index, person in
                    .init(
                        personId: person,
                        delivery: NotificationDelivery(
                            pushSkipped: index == 1 ? .preferenceOff : nil, mail: .sold, mailSkipped: index == 2 ? .blocked : nil))
                })
            let own = OutboxNotification(
                notificationId: "n-own", kind: .newSignIn, addressee: "p1", idsJSON: "{}", sourcePosition: 8,
                happenedAt: Date(timeIntervalSince1970: 1_800_000_000),
                recipients: [.init(personId: "p1", delivery: NotificationDelivery.decide(.newSignIn, ids: [:], facts: RecipientFacts()))])
            let taken = try await db.client.withConnection { connection in
                try NotificationOutbox.enqueue([shopNews, own], on: connection)
                try NotificationOutbox.enqueue([shopNews, own], on: connection)
                return try NotificationOutbox.take(.push, limit: 10, on: connection)
            }
            #expect(taken.count == 2, "each notification once, whatever was enqueued twice")
            #expect(taken.entries.map(\.recipientId) == odd + ["p1"])
            #expect(taken.entries.map(\.delivery.pushSkipped) == [nil, .preferenceOff, nil, nil, nil])
            #expect(taken.entries.map(\.delivery.mailSkipped) == [nil, nil, .blocked, nil, nil])
            #expect(taken.entries.map(\.delivery.mail) == [.sold, .sold, .sold, .sold, .notifications])
            #expect(taken.entries.first?.ids == ids)
            // A person's notification that skips nothing is written with NULLs alone.
            let nulls = try await db.scalar(
                "SELECT count(*)::int FROM notification_outbox WHERE notification_id = 'n-own' AND recipients IS NULL AND push_skipped IS NULL AND mail_skipped IS NULL",
                Int.self)
            #expect(nulls == 1)
            let mail = try await db.client.withConnection { try NotificationOutbox.take(.mail, limit: 10, on: $0) }
            #expect(mail.count == 2 && mail.entries.count == 5)
            #expect(try await db.client.withConnection { try NotificationOutbox.take(.push, limit: 10, on: $0) }.count == 0, "taken once")
        }
    }
}
