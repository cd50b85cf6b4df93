import Foundation
import InboxDomain
import InboxTesting
import NotificationOutbox
import PostgresClient
import Testing

/// `NotificationOutbox`: a notification goes in once, with its recipients' decisions, and comes
/// back one entry per recipient, whatever the ids hold.
@Suite struct NotificationOutboxTests {
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
