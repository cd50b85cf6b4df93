import Encodings
import Foundation
import InboxDomain
import PostgresClient

/// A notification decided for one person, as it goes into the outbox: what it is, whom it is
/// for, and how it reaches them (decided as of its event's place in the log, `NotificationDelivery`).
public struct OutboxNotification: Sendable, Hashable {
    /// The bell entry's id for a notification about the person; a shop's news' own id (the same
    /// for everybody who works at the shop) otherwise.
    public var notificationId: String
    public var kind: NotificationKind
    /// The person it is for; empty for a shop's news nobody works at to hear (its delivery says
    /// `no_member`, and it is counted, never sent).
    public var recipientId: String
    /// The ids as a JSON object with sorted keys (`OutboxNotification.json`).
    public var idsJSON: String
    /// The position of the event it tells of; 0 for what the schedule decides (a reminder).
    public var sourcePosition: Int64
    /// When what it tells happened: its event's time in the log (the reminder's check's time).
    public var happenedAt: Date
    public var delivery: NotificationDelivery

    public init(
        notificationId: String, kind: NotificationKind, recipientId: String, idsJSON: String, sourcePosition: Int64, happenedAt: Date,
        delivery: NotificationDelivery
    ) {
        self.notificationId = notificationId
        self.kind = kind
        self.recipientId = recipientId
        self.idsJSON = idsJSON
        self.sourcePosition = sourcePosition
        self.happenedAt = happenedAt
        self.delivery = delivery
    }

    /// `ids` as a JSON object with sorted keys, so the same ids are always the same text.
    public static func json(_ ids: [String: String]) -> String {
        var bytes: [UInt8] = [UInt8(ascii: "{")]
        bytes.reserveCapacity(96)
        for key in ids.keys.sorted() {
            if bytes.count > 1 { bytes.append(UInt8(ascii: ",")) }
            JSONString.append(key, to: &bytes)
            bytes.append(UInt8(ascii: ":"))
            JSONString.append(ids[key]!, to: &bytes)
        }
        bytes.append(UInt8(ascii: "}"))
        return String(decoding: bytes, as: UTF8.self)
    }
}

/// A notification read back from the outbox, by the fan-out or the mailer.
public struct OutboxEntry: Sendable, Hashable {
    public var id: Int64
    public var notificationId: String
    public var kind: NotificationKind
    /// The person it is for (empty: nobody, `delivery` says why).
    public var recipientId: String
    public var ids: [String: String]
    public var sourcePosition: Int64
    /// When what it tells happened (its event's time in the log).
    public var happenedAt: Date
    /// When it was enqueued: a device registered later does not get it.
    public var enqueuedAt: Date
    public var delivery: NotificationDelivery

    public init(
        id: Int64, notificationId: String, kind: NotificationKind, recipientId: String, ids: [String: String], sourcePosition: Int64 = 0,
        happenedAt: Date, enqueuedAt: Date, delivery: NotificationDelivery
    ) {
        self.id = id
        self.notificationId = notificationId
        self.kind = kind
        self.recipientId = recipientId
        self.ids = ids
        self.sourcePosition = sourcePosition
        self.happenedAt = happenedAt
        self.enqueuedAt = enqueuedAt
        self.delivery = delivery
    }
}

/// The notification outbox (`notification_outbox`, sql/002, 006, 014, 018, 019) and its two pending
/// queues, one per channel: the only code that writes the outbox and the only way the fan-out and
/// the mailer read it.
///
/// - Written in the transaction that decides it: the bell projection's (live and inline), its
///   catch-up from empty tables (COPY), and the schedule's reminders. A notification already there
///   is never written again (its key: position, notification id, audience, recipient), which is the
///   side-effect gate of a catch-up that meets what it enqueued before.
/// - The outbox's statement trigger fills `notification_outbox_pending` with every row an insert
///   wrote, and `mail_pending` with those of a kind that is mailed, in the same transaction, and
///   NOTIFYs `inbox_outbox`.
/// - A taker deletes what it takes from its queue in its own transaction (`FOR UPDATE SKIP
///   LOCKED`), so any number of fan-outs and mailers take each entry once.
public enum NotificationOutbox {
    /// What the outbox's trigger NOTIFYs when something was enqueued.
    public static let channel = "inbox_outbox"

    static let columns =
        "notification_id, audience, recipient_id, category, event, ids, source_position, created_at, push_skipped, mail_stream, mail_skipped"

    /// The insert of `notifications`, leaving those already enqueued; nil for none.
    public static func insert(_ notifications: [OutboxNotification]) -> PostgresStatement? {
        if notifications.isEmpty { return nil }
        return PostgresStatement(
            """
            INSERT INTO notification_outbox (\(columns))
            SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::jsonb[], $7::bigint[], $8::timestamptz[],
                $9::text[], $10::text[], $11::text[])
            ON CONFLICT DO NOTHING
            """, notifications.map(\.notificationId), notifications.map(\.kind.audience.rawValue), notifications.map(\.recipientId),
            notifications.map(\.kind.category.rawValue), notifications.map(\.kind.word), notifications.map { PostgresRawJSON($0.idsJSON) },
            notifications.map(\.sourcePosition), notifications.map(\.happenedAt), notifications.map(\.delivery.pushSkipped?.rawValue),
            notifications.map(\.delivery.mail?.key), notifications.map(\.delivery.mailSkipped?.rawValue))
    }

    /// Enqueues `notifications`, leaving those already enqueued.
    public static func enqueue(_ notifications: [OutboxNotification], on connection: PostgresConnection) throws {
        if let statement = insert(notifications) { try connection.query(statement.sql, binds: statement.binds) }
    }

    /// Enqueues many `notifications` at once (a catch-up's), in the log's order, through COPY, leaving
    /// those already enqueued.
    ///
    /// The outbox's key leads with the event's position (sql/018), so whether any of them can be
    /// there already is one look at the key over their positions. None (the usual case: a first
    /// catch-up, or one after the outbox was emptied): the rows are copied straight in. Some:
    /// through a temporary table and `INSERT ... ON CONFLICT DO NOTHING`, which costs a second copy
    /// of every row and a sort that spills to disk. Should another writer enqueue one of them
    /// between the look and the COPY, the COPY fails on the key, and the caller's transaction with it.
    public static func copy(_ notifications: [OutboxNotification], on connection: PostgresConnection) throws {
        let positions = notifications.map(\.sourcePosition)
        guard let lowest = positions.min(), let highest = positions.max() else { return }
        let anyThere = try connection.query(
            "SELECT EXISTS (SELECT 1 FROM notification_outbox WHERE source_position BETWEEN $1 AND $2)", lowest, highest
        ).scalar(Bool.self)
        guard anyThere else {
            try connection.copyIn(notifications, into: "COPY notification_outbox (\(columns)) FROM STDIN", rowsPerStatement: .max, row: fields)
            return
        }
        try connection.execute(
            """
            CREATE TEMPORARY TABLE outbox_catch_up (
                ordinal bigint, notification_id text, audience text, recipient_id text, category text, event text, ids jsonb,
                source_position bigint, created_at timestamptz, push_skipped text, mail_stream text, mail_skipped text
            ) ON COMMIT DROP
            """)
        try connection.copyIn("COPY outbox_catch_up (ordinal, \(columns)) FROM STDIN") { writer in
            for (ordinal, notification) in notifications.enumerated() { try writer.write(row: [String(ordinal)] + fields(notification)) }
        }
        try connection.execute("INSERT INTO notification_outbox (\(columns)) SELECT \(columns) FROM outbox_catch_up ORDER BY ordinal ON CONFLICT DO NOTHING")
    }

    private static func fields(_ notification: OutboxNotification) -> [String?] {
        [
            notification.notificationId, notification.kind.audience.rawValue, notification.recipientId, notification.kind.category.rawValue,
            notification.kind.word, notification.idsJSON, String(notification.sourcePosition), notification.happenedAt.postgresText,
            notification.delivery.pushSkipped?.rawValue, notification.delivery.mail?.key, notification.delivery.mailSkipped?.rawValue,
        ]
    }

    // MARK: Taking

    /// A channel's pending queue.
    public enum Queue: Sendable {
        /// `notification_outbox_pending`: every notification, for the fan-out (which counts the
        /// ones not pushed by their reason).
        case push
        /// `mail_pending`: the notifications of a kind that is mailed, for the mailer.
        case mail

        var table: String {
            switch self {
            case .push: "notification_outbox_pending"
            case .mail: "mail_pending"
            }
        }
    }

    /// Entries read back, and how many of those asked for this release cannot read (a kind a newer
    /// release enqueued): the caller counts them.
    public struct Taken: Sendable {
        public var entries: [OutboxEntry]
        public var unreadable: Int

        /// Everything taken, read or not.
        public var count: Int { entries.count + unreadable }
    }

    /// Takes up to `limit` entries off `queue`, oldest first, skipping those another taker holds,
    /// in the caller's transaction: they leave the queue when it commits, and come back if it
    /// rolls back.
    public static func take(_ queue: Queue, limit: Int, on connection: PostgresConnection) throws -> Taken {
        try entries(
            """
            WITH taken AS (
                DELETE FROM \(queue.table) WHERE outbox_id = ANY(ARRAY(
                    SELECT outbox_id FROM \(queue.table) ORDER BY outbox_id LIMIT $1 FOR UPDATE SKIP LOCKED))
                RETURNING outbox_id)
            SELECT \(selected) FROM taken t JOIN notification_outbox o ON o.id = t.outbox_id ORDER BY o.id
            """, Int64(limit), on: connection)
    }

    /// The entries of `ids`, in their order in the outbox.
    public static func entries(_ ids: [Int64], on connection: PostgresConnection) throws -> Taken {
        if ids.isEmpty { return Taken(entries: [], unreadable: 0) }
        return try entries("SELECT \(selected) FROM notification_outbox o WHERE o.id = ANY($1::bigint[]) ORDER BY o.id", ids, on: connection)
    }

    /// The columns `entries` reads, of the outbox as `o`.
    private static let selected = """
        o.id, o.notification_id, o.audience, o.recipient_id, o.event, o.source_position, o.created_at, o.enqueued_at,
            o.push_skipped, o.mail_stream, o.mail_skipped,
            ARRAY(SELECT key FROM jsonb_each_text(o.ids) ORDER BY key) AS id_keys,
            ARRAY(SELECT value FROM jsonb_each_text(o.ids) ORDER BY key) AS id_values
        """

    private static func entries(_ sql: String, _ argument: some PostgresEncodable, on connection: PostgresConnection) throws -> Taken {
        let rows = try connection.query(sql, argument)
        var entries: [OutboxEntry] = []
        var unreadable = 0
        entries.reserveCapacity(rows.count)
        for row in rows {
            guard let audience = NotificationKind.Audience(rawValue: try row.decode(String.self, "audience")),
                let kind = NotificationKind(word: try row.decode(String.self, "event"), audience: audience)
            else {
                unreadable += 1
                continue
            }
            let keys = try row.decode([String].self, "id_keys")
            let values = try row.decode([String].self, "id_values")
            entries.append(
                OutboxEntry(
                    id: try row.decode(Int64.self, "id"), notificationId: try row.decode(String.self, "notification_id"), kind: kind,
                    recipientId: try row.decode(String.self, "recipient_id"), ids: Dictionary(zip(keys, values)) { first, _ in first },
                    sourcePosition: try row.decode(Int64.self, "source_position"), happenedAt: try row.decode(Date.self, "created_at"),
                    enqueuedAt: try row.decode(Date.self, "enqueued_at"),
                    delivery: NotificationDelivery(
                        pushSkipped: try row.decode(String?.self, "push_skipped").flatMap(SkipReason.init(rawValue:)),
                        mail: try row.decode(String?.self, "mail_stream").flatMap(MailStream.init(key:)),
                        mailSkipped: try row.decode(String?.self, "mail_skipped").flatMap(SkipReason.init(rawValue:)))))
        }
        return Taken(entries: entries, unreadable: unreadable)
    }

    // MARK: Status

    /// How much waits in a queue, and the age of the oldest.
    public struct Waiting: Sendable, Hashable {
        public var count: Int
        public var oldestSeconds: Double
    }

    /// What waits in `queue` now.
    public static func waiting(_ queue: Queue, on connection: PostgresConnection) throws -> Waiting {
        let row = try connection.query(
            """
            SELECT count(*), coalesce(extract(epoch FROM clock_timestamp() - min(o.enqueued_at)), 0)::float8
            FROM \(queue.table) p JOIN notification_outbox o ON o.id = p.outbox_id
            """)[0]
        return Waiting(count: try row.decode(Int.self, at: 0), oldestSeconds: try row.decode(Double.self, at: 1))
    }
}
