import Crypto
import Encodings
import Foundation
import InboxDomain
import NotificationOutbox
import PostgresClient
import Projections

/// The `shop_unanswered` reminder (docs/schedule.md): one check at a given moment, which tells each
/// shop that has buyers waiting for an answer, in one push, and records what it reminded.
///
/// What waits (the seed's rules, read from the live read models):
/// - a thread about a watch (not Wristler's aftercare thread) whose last message is the buyer's,
///   read or not, written within `window` before the check;
/// - not archived on the shop's side, not about a watch that is sold, offline or deleted, not one
///   that led to an order, not marked "no reply needed" (a buyer's message clears that mark), not
///   closed by a block, and not with a buyer Wristler blocked;
/// - and its last message was not reminded of before: one reminder per waiting message; the
///   buyer's next message is a new waiting message.
///
/// Guarantees:
/// - **One push per shop per check**, holding everything of that shop that waits, and at most one
///   per `gap`: a shop reminded less than `gap` ago is left out, and its messages keep waiting for
///   its next push.
/// - **Never twice.** A check is one transaction: it reads, writes the outbox rows and records the
///   messages and the shop's time (`shop_reminded_messages`, `shop_reminders`), then commits, so
///   either all of it happened or none. Checks are serialized by a transaction advisory lock, so a
///   second node or a second process checking at the same moment waits and then finds nothing
///   left. These tables are state, not read models: a replay leaves them alone. The outbox row's
///   `notification_id` is derived from the shop and its newest reminded message, and the outbox
///   refuses a second row with it, which is a second guard.
/// - **To the people who work at the shop now**, each as their own `shop` switch says: the bell's
///   facts (`AudienceReader`), which decide every other shop news too; a shop nobody works at is
///   counted (`skipped.no_member`), not pushed.
/// - **Not from stale read models**: while the threads, people or bell projection leaves an event
///   unapplied for longer than `maximumLag`, a check does nothing and says so
///   (`Outcome.projectionsBehind`), since the shop's answer may be among those events.
/// - **Cost follows the waiting threads**: the read goes through the partial index
///   `conversations_waiting` (the buyer's last message, by time) and looks each candidate up by key.
public struct ShopReminders: Sendable {
    public struct Settings: Sendable, Hashable {
        /// The least time between two reminders of one shop (INBOX_SHOP_REMINDER_GAP_SECONDS).
        public var gap: Duration
        /// How old a buyer's message may be and still count (INBOX_SHOP_REMINDER_WINDOW_DAYS).
        public var window: Duration
        /// How long the threads and people projections may leave an event unapplied before a
        /// check waits for them rather than remind from what they do not know yet (the shop's
        /// answer, an archive, a block).
        public var maximumLag: Duration

        public init(gap: Duration = .seconds(7200), window: Duration = .seconds(14 * 86_400), maximumLag: Duration = .seconds(60)) {
            self.gap = gap
            self.window = window
            self.maximumLag = maximumLag
        }
    }

    /// A message a reminder is about.
    public struct WaitingMessage: Sendable, Hashable {
        public var conversationId: String
        public var messageId: String
        public var sentAt: Date
    }

    /// The push one shop got from a check.
    public struct Reminder: Sendable, Hashable {
        public var shopId: String
        /// The outbox row's `notification_id` (see `notificationId(shop:newestMessage:)`).
        public var notificationId: String
        /// Oldest first.
        public var messages: [WaitingMessage]
    }

    /// What one check did.
    public struct Outcome: Sendable, Hashable {
        /// One per shop reminded, by shop id.
        public var reminders: [Reminder] = []
        /// Shops with messages waiting that were reminded less than the gap ago: their messages
        /// stay waiting for their next push.
        public var shopsHeldBack: Int = 0
        /// The projections the check depends on that left an event unapplied for longer than
        /// `maximumLag`: the check did nothing, and should be tried again soon.
        public var projectionsBehind: [String] = []

        public var messages: Int { reminders.reduce(0) { $0 + $1.messages.count } }
    }

    /// The kind of the outbox rows (`PushTexts` has its words), in category `shop`.
    public static let kind = NotificationKind.shopUnanswered
    /// The projections whose tables the check reads.
    public static let projections = ["bell", "people", "threads"]
    /// Serializes checks of every node (the second key is `hashtext('shop_reminders')`). Not the
    /// schedule's lease: a check on any session must wait for one in flight, wherever it runs.
    static let lockClass: Int32 = 0x1B10

    public let settings: Settings

    public init(settings: Settings = Settings()) {
        self.settings = settings
    }

    /// The outbox row's `notification_id` for a reminder of `shop` whose newest waiting message is
    /// `newestMessage`: the same pair always gives the same id, so a row written twice is refused
    /// by the outbox's unique key. Shaped as the bell's ids are (a version 8 UUID from SHA-256).
    public static func notificationId(shop: String, newestMessage: String) -> String {
        SHA256.uuidString(naming: "wristler-shop-unanswered:\(shop):\(newestMessage)".utf8)
    }

    /// Checks at `now`, in one transaction of its own on `connection`: finds what waits, writes one
    /// outbox row per shop that may be reminded, records it, and commits.
    public func check(now: Date, on connection: PostgresConnection) throws -> Outcome {
        let since = now.addingTimeInterval(-settings.window.inSeconds)
        let gapStart = now.addingTimeInterval(-settings.gap.inSeconds)
        return try connection.transaction { connection in
            // A check in flight elsewhere commits first; every statement after this one sees it.
            try connection.query("SELECT pg_advisory_xact_lock($1, hashtext('shop_reminders'))", Self.lockClass)
            // The read is a prepared statement; planned for this check's times, it takes the index
            // for a window of days, where a generic plan guesses a third of the table.
            try connection.execute("SET LOCAL plan_cache_mode = force_custom_plan")
            // After a restart or an outage the projectors may still be catching up: what the shop
            // did meanwhile (answered, archived) is in the log but not yet in the tables.
            let behind = try connection.query(
                """
                SELECT c.projection FROM projection_checkpoints c
                WHERE c.projection = ANY($1) AND EXISTS (
                    SELECT 1 FROM events e WHERE (e.transaction_id, e.position) > (c.transaction_id, c.position) AND e.recorded_at < $2)
                ORDER BY c.projection
                """, Self.projections, now.addingTimeInterval(-settings.maximumLag.inSeconds)
            ).map { try $0.decode(String.self, at: 0) }
            if !behind.isEmpty { return Outcome(projectionsBehind: behind) }
            let rows = try connection.query(Self.waitingQuery, since, gapStart)
            var waiting: [String: [WaitingMessage]] = [:]
            var shopsHeldBack: Set<String> = []
            for row in rows {
                let shop = try row.decode(String.self, "shop_id")
                if try row.decode(Bool.self, "held_back") {
                    shopsHeldBack.insert(shop)
                    continue
                }
                waiting[shop, default: []].append(
                    WaitingMessage(
                        conversationId: try row.decode(String.self, "conversation_id"), messageId: try row.decode(String.self, "last_message_id"),
                        sentAt: try row.decode(Date.self, "last_message_at")))
            }
            // Old rows go whether or not anything waits now; none of their messages can count again.
            try connection.query("DELETE FROM shop_reminded_messages WHERE message_at < $1", since)
            var outcome = Outcome(shopsHeldBack: shopsHeldBack.count)
            if waiting.isEmpty { return outcome }
            for shop in waiting.keys.sorted() {
                let messages = waiting[shop]!.sorted { ($0.sentAt, $0.messageId) < ($1.sentAt, $1.messageId) }
                outcome.reminders.append(
                    Reminder(shopId: shop, notificationId: Self.notificationId(shop: shop, newestMessage: messages.last!.messageId), messages: messages))
            }
            try record(outcome.reminders, now: now, on: connection)
            return outcome
        }
    }

    /// The check's read ($1: the window's start, $2: the gap's start), public for EXPLAIN in tests
    /// and benchmarks. Waiting threads, one row each: the buyer's last message in the window, none
    /// of the seed's exclusions, not reminded of yet; `held_back`: its shop was reminded less than
    /// the gap ago.
    ///
    /// Its cost follows the waiting threads, whatever the size of the history: `conversations` is
    /// read through the partial index `conversations_waiting` (the buyer's last messages, by time),
    /// and every other table is looked up by its key, once per such thread. The lookups are scalar
    /// subqueries on purpose: PostgreSQL turns `NOT EXISTS` into an anti-join, which it may run as
    /// a hash join over a whole table (every sold watch ever, both sides of every thread) when
    /// many threads wait; a scalar subquery is always a lookup per row.
    public static let waitingQuery = """
        SELECT c.shop_id, c.conversation_id, c.last_message_id, c.last_message_at,
            (SELECT true FROM shop_reminders h WHERE h.shop_id = c.shop_id AND h.last_reminded_at > $2) IS NOT NULL AS held_back
        FROM conversations c
        WHERE c.last_message_side = 'buyer' AND c.kind = 'watch' AND c.last_message_at >= $1
            AND c.shop_id IS NOT NULL AND c.last_message_id IS NOT NULL
            AND NOT c.led_to_order AND NOT c.closed_by_block AND NOT c.no_reply_needed
            AND (SELECT s.archived FROM thread_sides s WHERE s.conversation_id = c.conversation_id AND s.side = 'seller') IS NOT TRUE
            AND coalesce((SELECT w.status FROM thread_watches w WHERE w.watch_id = c.watch_id), 'for_sale')
                NOT IN ('sold', 'offline', 'deleted')
            AND (SELECT true FROM blocked_accounts b WHERE b.person_id = c.buyer_id) IS NULL
            AND (SELECT true FROM shop_reminded_messages r WHERE r.message_id = c.last_message_id) IS NULL
        """

    /// The outbox rows (kind `shop_unanswered`, ids `{"sellerId": shop}`: the shop's inbox), each
    /// decided for the people who work at the shop, the reminded messages and each shop's time, in
    /// the check's transaction. The outbox insert fires the pending-queue trigger and its NOTIFY, as
    /// the bell's inserts do.
    private func record(_ reminders: [Reminder], now: Date, on connection: PostgresConnection) throws {
        let shops = reminders.map(\.shopId)
        let ids = reminders.map(\.notificationId)
        let audience = try AudienceReader.read(people: [String](), shops: shops, on: connection)
        let notifications = reminders.map { reminder in
            let ids = ["sellerId": reminder.shopId]
            let people = audience.members(of: reminder.shopId)
            return OutboxNotification(
                notificationId: reminder.notificationId, kind: Self.kind, addressee: reminder.shopId, idsJSON: OutboxNotification.json(ids),
                sourcePosition: 0, happenedAt: now,
                recipients: people.isEmpty
                    ? [.nobody(Self.kind, ids: ids)] : people.map { .init(personId: $0, delivery: audience.delivery(Self.kind, ids: ids, for: $0)) })
        }
        try NotificationOutbox.enqueue(notifications, on: connection)
        let messages = reminders.flatMap { reminder in reminder.messages.map { (reminder.shopId, $0) } }
        try connection.query(
            """
            INSERT INTO shop_reminded_messages (message_id, shop_id, conversation_id, message_at, reminded_at)
            SELECT u.message, u.shop, u.conversation, u.at, $5 FROM unnest($1::text[], $2::text[], $3::text[], $4::timestamptz[])
                AS u(message, shop, conversation, at)
            ON CONFLICT (message_id) DO NOTHING
            """, messages.map(\.1.messageId), messages.map(\.0), messages.map(\.1.conversationId), messages.map(\.1.sentAt), now)
        try connection.query(
            """
            INSERT INTO shop_reminders AS r (shop_id, last_reminded_at, last_notification_id, reminders, messages)
            SELECT u.shop, $4, u.id, 1, u.messages FROM unnest($1::text[], $2::text[], $3::bigint[]) AS u(shop, id, messages)
            ON CONFLICT (shop_id) DO UPDATE SET last_reminded_at = greatest(r.last_reminded_at, excluded.last_reminded_at),
                last_notification_id = excluded.last_notification_id, reminders = r.reminders + 1,
                messages = r.messages + excluded.messages
            """, shops, ids, reminders.map { Int64($0.messages.count) }, now)
    }

    /// What the schedule has reminded so far, for `inbox status` and /metrics.
    public struct Totals: Sendable, Hashable {
        public var shops: Int64
        public var reminders: Int64
        public var messages: Int64
    }

    public static func totals(on connection: PostgresConnection) throws -> Totals {
        let row = try connection.query(
            "SELECT count(*)::bigint, coalesce(sum(reminders), 0)::bigint, coalesce(sum(messages), 0)::bigint FROM shop_reminders")[0]
        return Totals(shops: try row.decode(Int64.self, at: 0), reminders: try row.decode(Int64.self, at: 1), messages: try row.decode(Int64.self, at: 2))
    }
}
