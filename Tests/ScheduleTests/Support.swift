import EventLog
import Foundation
import InboxDomain
import InboxTesting
import PostgresClient
import Projections
import Schedule

/// A thread between a buyer and a shop about a watch, named after a test's case: ids are
/// `c-<name>`, `b-<name>`, `s-<name>`, `w-<name>`, messages `m-<name>-<n>`.
struct ShopThread: Sendable {
    let name: String
    var conversationId: String { "c-\(name)" }
    var buyerId: String { "b-\(name)" }
    var shopId: String
    var watchId: String { "w-\(name)" }

    init(_ name: String, shop: String? = nil) {
        self.name = name
        shopId = shop ?? "s-\(name)"
    }

    func message(_ number: Int) -> String { "m-\(name)-\(number)" }

    func start(kind: ConversationKind = .watch) -> ConversationStarted {
        ConversationStarted(
            conversationId: conversationId, kind: kind, buyerId: buyerId, shopId: shopId, watchId: kind == .watch ? watchId : nil,
            orderId: kind == .aftercare ? "o-\(name)" : nil)
    }

    func buyerWrites(_ number: Int) -> MessageSent {
        MessageSent(conversationId: conversationId, messageId: message(number), authorSide: .buyer, authorId: buyerId, body: "Is it still for sale?")
    }

    func shopWrites(_ number: Int) -> MessageSent {
        MessageSent(conversationId: conversationId, messageId: message(number), authorSide: .seller, authorId: "member-\(name)", body: "Yes, it is.")
    }

    func wristlerWrites(_ number: Int) -> MessageSent {
        MessageSent(conversationId: conversationId, messageId: message(number), authorSide: .wristler, authorId: "agent", body: "A note from Wristler.")
    }
}

/// An outbox row of a reminder, as the fan-out will read it.
struct ReminderRow: Sendable, Hashable {
    var notificationId: String
    var audience: String
    var recipientId: String
    var category: String
    var ids: String
    var pending: Bool
    /// Who it is for, comma-separated (empty: nobody works at the shop).
    var recipients: String = ""
}

extension TestDatabase {
    /// Appends `events` in order, one batch, and waits until every projection has applied them.
    func appendAndProject(_ events: [any CatalogueEvent]) async throws {
        _ = try await store.append(try events.map { try NewEvent(catalogueEvent: $0) })
        try await project()
    }

    /// Runs the projectors until they stand at the head of the log.
    func project() async throws {
        try await withProjectors { try await self.waitUntilProjected() }
    }

    /// One check of `reminders` at `now` on a pooled connection.
    func check(_ reminders: ShopReminders = ShopReminders(), at now: Date) async throws -> ShopReminders.Outcome {
        try await client.withConnection { connection in try reminders.check(now: now, on: connection) }
    }

    /// When a message was written, as the threads recorded it.
    func sentAt(_ messageId: String) async throws -> Date {
        try await client.withConnection { connection in
            try connection.query("SELECT sent_at FROM messages WHERE message_id = $1", messageId).scalar(Date.self)
        }
    }

    /// The outbox rows of reminders, by id.
    func reminderRows() async throws -> [ReminderRow] {
        try await client.withConnection { connection in
            try connection.query(
                """
                SELECT o.notification_id, o.audience, o.recipient_id, o.category, o.ids::text,
                    EXISTS (SELECT 1 FROM notification_outbox_pending p WHERE p.outbox_id = o.id) AS pending,
                    array_to_string(o.recipients, ',') AS recipients
                FROM notification_outbox o WHERE o.event = 'shop_unanswered' ORDER BY o.id
                """
            ).map {
                ReminderRow(
                    notificationId: try $0.decode(String.self, at: 0), audience: try $0.decode(String.self, at: 1),
                    recipientId: try $0.decode(String.self, at: 2), category: try $0.decode(String.self, at: 3),
                    ids: try $0.decode(String.self, at: 4), pending: try $0.decode(Bool.self, at: 5), recipients: try $0.decode(String.self, at: 6))
            }
        }
    }
}

/// A whole second at or after `date`: checks at whole seconds from it are exact in `Date` and in
/// PostgreSQL's microseconds, so the edges of the gap are met to the microsecond.
func wholeSecond(after date: Date) -> Date {
    Date(timeIntervalSince1970: date.timeIntervalSince1970.rounded(.up))
}

extension ShopReminders.Outcome {
    /// Shop id to the message ids it was reminded of.
    var remindedMessages: [String: [String]] {
        Dictionary(uniqueKeysWithValues: reminders.map { ($0.shopId, $0.messages.map(\.messageId)) })
    }
}

let hour: TimeInterval = 3600
let day: TimeInterval = 86_400
