import Encodings
import Foundation
import InboxDomain
import JSONParsing
import PostgresClient
import Synchronization

/// A notification as it goes into the outbox: what it is, whom it is about, and how it reaches each
/// person it is for, decided as of its event's place in the log (`NotificationDelivery`).
public struct OutboxNotification: Sendable, Hashable {
    /// A person a notification is for, and how it reaches them.
    public struct Recipient: Sendable, Hashable {
        /// Empty for a shop's news nobody works at (its delivery says `no_member`: counted, never sent).
        public var personId: String
        public var delivery: NotificationDelivery

        public init(personId: String, delivery: NotificationDelivery) {
            self.personId = personId
            self.delivery = delivery
        }

        /// The one recipient of a shop's news nobody works at.
        public static func nobody(_ kind: NotificationKind, ids: [String: String]) -> Recipient {
            Recipient(personId: "", delivery: .nobody(kind, ids: ids))
        }
    }

    /// The bell entry's id for a notification about the person; a shop's news' own id otherwise.
    public var notificationId: String
    public var kind: NotificationKind
    /// Whom it is about: the person, or the shop (`recipient_id`).
    public var addressee: String
    /// The ids as a JSON object with sorted keys (`OutboxNotification.json`).
    public var idsJSON: String
    /// The position of the event it tells of; 0 for what the schedule decides (a reminder).
    public var sourcePosition: Int64
    /// When what it tells happened: its event's time in the log (the reminder's check's time).
    public var happenedAt: Date
    /// The person themselves, or each person who works at the shop, in order.
    public var recipients: [Recipient]

    public init(
        notificationId: String, kind: NotificationKind, addressee: String, idsJSON: String, sourcePosition: Int64, happenedAt: Date,
        recipients: [Recipient]
    ) {
        self.notificationId = notificationId
        self.kind = kind
        self.addressee = addressee
        self.idsJSON = idsJSON
        self.sourcePosition = sourcePosition
        self.happenedAt = happenedAt
        self.recipients = recipients
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

/// A notification read back from the outbox for one of its recipients, by the fan-out or the
/// mailer: a row of a shop's news gives one entry per person who works at the shop, all with the
/// row's `id`.
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
/// - The outbox's statement trigger fills `notification_outbox_pending` and `mail_pending` with
///   every row an insert wrote, in the same transaction, and NOTIFYs `inbox_outbox`.
/// - A taker deletes what it takes from its queue in its own transaction (`FOR UPDATE SKIP
///   LOCKED`), so any number of fan-outs and mailers take each entry once.
public enum NotificationOutbox {
    /// What the outbox's trigger NOTIFYs when something was enqueued.
    public static let channel = "inbox_outbox"

    static let columns = """
        notification_id, audience, recipient_id, category, event, ids, source_position, created_at, recipients, push_skipped, mail_skipped
        """

    /// The insert of `notifications`, leaving those already enqueued; nil for none.
    public static func insert(_ notifications: [OutboxNotification]) -> PostgresStatement? {
        if notifications.isEmpty { return nil }
        let decisions = notifications.map(Decisions.init)
        return PostgresStatement(
            """
            INSERT INTO notification_outbox (\(columns))
            SELECT n, a, r, c, e, i, p, t, rs::text[], ps::text[], ms::text[]
            FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::jsonb[], $7::bigint[], $8::timestamptz[],
                $9::text[], $10::text[], $11::text[]) AS u(n, a, r, c, e, i, p, t, rs, ps, ms)
            ON CONFLICT DO NOTHING
            """, notifications.map(\.notificationId), notifications.map(\.kind.audience.rawValue), notifications.map(\.addressee),
            notifications.map(\.kind.category.rawValue), notifications.map(\.kind.word), notifications.map { PostgresRawJSON($0.idsJSON) },
            notifications.map(\.sourcePosition), notifications.map(\.happenedAt), decisions.map(\.recipients), decisions.map(\.pushSkipped),
            decisions.map(\.mailSkipped))
    }

    /// A notification's recipients and their decisions as the text of `text[]` values: parallel
    /// arrays, `''` where a channel is not skipped. What is the same for almost every row is NULL:
    /// the recipients of a person's notification (the person), and a channel nobody is skipped on.
    struct Decisions {
        var recipients: String?
        var pushSkipped: String?
        var mailSkipped: String?

        init(_ notification: OutboxNotification) {
            // Written by hand: a catch-up makes these for hundreds of thousands of rows.
            let people = notification.recipients
            if notification.kind.audience == .shop || people.count != 1 || people[0].personId != notification.addressee {
                var literal = "{"
                for (index, recipient) in people.enumerated() {
                    if index > 0 { literal += "," }
                    Self.append(recipient.personId, to: &literal)
                }
                recipients = literal + "}"
            }
            pushSkipped = Self.literal(people) { $0.delivery.pushSkipped }
            mailSkipped = Self.literal(people) { $0.delivery.mailSkipped }
        }

        /// The recipients' reasons as an array literal, `""` for none; nil when there is none at all.
        static func literal(_ people: [OutboxNotification.Recipient], _ reason: (OutboxNotification.Recipient) -> SkipReason?) -> String? {
            guard people.contains(where: { reason($0) != nil }) else { return nil }
            return "{" + people.map { reason($0)?.rawValue ?? "\"\"" }.joined(separator: ",") + "}"
        }

        /// `text` as a quoted element of an array literal.
        static func append(_ text: String, to literal: inout String) {
            literal += "\""
            if text.utf8.contains(where: { $0 == UInt8(ascii: "\"") || $0 == UInt8(ascii: "\\") }) {
                for character in text {
                    if character == "\"" || character == "\\" { literal += "\\" }
                    literal.append(character)
                }
            } else {
                literal += text
            }
            literal += "\""
        }
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
                source_position bigint, created_at timestamptz, recipients text[], push_skipped text[], mail_skipped text[]
            ) ON COMMIT DROP
            """)
        try connection.copyIn("COPY outbox_catch_up (ordinal, \(columns)) FROM STDIN") { writer in
            for (ordinal, notification) in notifications.enumerated() { try writer.write(row: [String(ordinal)] + fields(notification)) }
        }
        try connection.execute("INSERT INTO notification_outbox (\(columns)) SELECT \(columns) FROM outbox_catch_up ORDER BY ordinal ON CONFLICT DO NOTHING")
    }

    private static func fields(_ notification: OutboxNotification) -> [String?] {
        let decisions = Decisions(notification)
        return [
            notification.notificationId, notification.kind.audience.rawValue, notification.addressee, notification.kind.category.rawValue,
            notification.kind.word, notification.idsJSON, String(notification.sourcePosition), notification.happenedAt.postgresText,
            decisions.recipients, decisions.pushSkipped, decisions.mailSkipped,
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

    /// Entries read back (one per recipient), and how many notifications of those asked for this
    /// release cannot read (a kind a newer release enqueued): the caller counts them.
    public struct Taken: Sendable {
        public var entries: [OutboxEntry]
        public var unreadable: Int
        /// The notifications (rows) taken, read or not.
        public var count: Int
        /// The highest outbox id taken (0: none).
        public var highest: Int64
    }

    /// Where a taker's next take starts (`take(_:limit:floor:on:)`): above the highest id taken
    /// so far, and from the queue's head when the part above had too few or a while has passed.
    /// One per taking role of a process, shared by its loops; a hint only: an id below it is
    /// still taken, at the latest `wholeQueueEvery` later.
    public final class TakeFloor: Sendable {
        /// How long an entry that committed after a later one was taken can wait below the floor.
        public static let wholeQueueEvery: Duration = .seconds(1)

        private let state = Mutex<(floor: Int64, wholeQueueAt: ContinuousClock.Instant?)>((0, nil))
        private let now: @Sendable () -> ContinuousClock.Instant

        /// `now`: the clock that says when the whole queue is due again (a test's, to step it).
        public init(now: @escaping @Sendable () -> ContinuousClock.Instant = { ContinuousClock.now }) {
            self.now = now
        }

        /// The id to start above, and whether to read the whole queue instead.
        func next() -> (from: Int64, wholeQueue: Bool) {
            let now = now()
            return state.withLock { state in
                guard state.floor > 0, let last = state.wholeQueueAt, now - last < Self.wholeQueueEvery else { return (0, true) }
                return (state.floor, false)
            }
        }

        /// A take reached `highest` (0: it took nothing), having read the whole queue or not.
        func took(upTo highest: Int64, wholeQueue: Bool) {
            let now = now()
            state.withLock { state in
                state.floor = max(state.floor, highest)
                if wholeQueue { state.wholeQueueAt = now }
            }
        }
    }

    /// Takes up to `limit` entries off `queue`, oldest first, skipping those another taker holds,
    /// in the caller's transaction: they leave the queue when it commits, and come back if it
    /// rolls back.
    ///
    /// With a `floor` (a taker's, kept from one take to the next), the take starts above the
    /// highest id taken before rather than at the queue's head. A queue is deleted from its head,
    /// and its index keeps every deleted entry until a VACUUM: a scan from the head walks past all
    /// of them, 5 ms for 800,000 (`inbox-bench fanout`, docs/fanout.md). Below the floor only an
    /// entry whose transaction committed after a later one's was taken can wait; so the whole
    /// queue is read too when the part above the floor had fewer than `limit`, and at least every
    /// `TakeFloor.wholeQueueEvery`.
    public static func take(_ queue: Queue, limit: Int, floor: TakeFloor? = nil, on connection: PostgresConnection) throws -> Taken {
        guard let floor else { return try take(queue, limit: limit, above: 0, upTo: .max, on: connection) }
        let (from, whole) = floor.next()
        var taken = try take(queue, limit: limit, above: whole ? 0 : from, upTo: .max, on: connection)
        var readWholeQueue = whole
        if !whole && taken.count < limit {
            // The head, for what committed late: taken in order before what was found above.
            let late = try take(queue, limit: limit - taken.count, above: 0, upTo: from, on: connection)
            taken = Taken(
                entries: late.entries + taken.entries, unreadable: late.unreadable + taken.unreadable, count: late.count + taken.count,
                highest: max(late.highest, taken.highest))
            readWholeQueue = true
        }
        floor.took(upTo: taken.highest, wholeQueue: readWholeQueue)
        return taken
    }

    /// Takes up to `limit` entries with ids in `above <.. upTo`, oldest first. The rows are deleted
    /// by their place (`ctid`), which the lock keeps from changing: no second walk of the index.
    private static func take(_ queue: Queue, limit: Int, above: Int64, upTo: Int64, on connection: PostgresConnection) throws -> Taken {
        try entries(
            """
            WITH taken AS (
                DELETE FROM \(queue.table) WHERE ctid = ANY(ARRAY(
                    SELECT ctid FROM \(queue.table) WHERE outbox_id > $2 AND outbox_id <= $3 ORDER BY outbox_id LIMIT $1 FOR UPDATE SKIP LOCKED))
                RETURNING outbox_id)
            SELECT \(selected) FROM taken t JOIN notification_outbox o ON o.id = t.outbox_id ORDER BY o.id
            """, binds: [PostgresBind(Int64(limit)), PostgresBind(above), PostgresBind(upTo)], on: connection)
    }

    /// The entries of `ids`, in their order in the outbox.
    public static func entries(_ ids: [Int64], on connection: PostgresConnection) throws -> Taken {
        if ids.isEmpty { return Taken(entries: [], unreadable: 0, count: 0, highest: 0) }
        return try entries("SELECT \(selected) FROM notification_outbox o WHERE o.id = ANY($1::bigint[]) ORDER BY o.id", binds: [PostgresBind(ids)], on: connection)
    }

    /// The columns `entries` reads, of the outbox as `o`, by position (the fan-out reads a row per
    /// entry, a thousand a batch).
    private static let selected = """
        o.id, o.notification_id, o.audience, o.recipient_id, o.event, o.source_position, o.created_at, o.enqueued_at,
            o.recipients, o.push_skipped, o.mail_skipped, o.ids::text AS ids
        """

    /// The ids of a notification out of its `ids` column as text. Read here rather than by
    /// `jsonb_each_text` in the statement: two sorted subqueries a row were 6 to 12 ms of
    /// PostgreSQL's time for a batch of 1,000, the text 0.4 ms (docs/fanout.md, "Throughput").
    /// Every writer writes strings (`json(_:)`); anything else is not an id and is left out.
    static func ids(_ text: String) throws -> [String: String] {
        guard case .object(let members) = try JSONValue(parsing: text) else { return [:] }
        return members.compactMapValues { value in
            if case .string(let string) = value { string } else { nil }
        }
    }

    private static func entries(_ sql: String, binds: [PostgresBind], on connection: PostgresConnection) throws -> Taken {
        let rows = try connection.query(sql, binds: binds)
        var entries: [OutboxEntry] = []
        var unreadable = 0
        var highest: Int64 = 0
        entries.reserveCapacity(rows.count)
        for row in rows {
            highest = max(highest, try row.decode(Int64.self, at: 0))
            guard let audience = NotificationKind.Audience(rawValue: try row.decode(String.self, at: 2)),
                let kind = NotificationKind(word: try row.decode(String.self, at: 4), audience: audience)
            else {
                unreadable += 1
                continue
            }
            let ids = try Self.ids(try row.decode(String.self, at: 11))
            let mail = MailStream.of(kind, ids: ids)
            let recipients: [String]
            var pushSkipped = try row.decode([String]?.self, at: 9) ?? []
            var mailSkipped = try row.decode([String]?.self, at: 10) ?? []
            if let listed = try row.decode([String]?.self, at: 8) {
                recipients = listed
            } else if audience == .person {
                recipients = [try row.decode(String.self, at: 3)]
            } else {
                // A shop's news enqueued before sql/019 and never decided (the migration decided
                // what waited): for nobody.
                recipients = [""]
                pushSkipped = [SkipReason.noMember.rawValue]
                mailSkipped = [SkipReason.noMember.rawValue]
            }
            let id = try row.decode(Int64.self, at: 0), notificationId = try row.decode(String.self, at: 1)
            let position = try row.decode(Int64.self, at: 5), happenedAt = try row.decode(Date.self, at: 6)
            let enqueuedAt = try row.decode(Date.self, at: 7)
            for (index, person) in recipients.enumerated() {
                entries.append(
                    OutboxEntry(
                        id: id, notificationId: notificationId, kind: kind, recipientId: person, ids: ids, sourcePosition: position,
                        happenedAt: happenedAt, enqueuedAt: enqueuedAt,
                        delivery: NotificationDelivery(
                            pushSkipped: index < pushSkipped.count ? SkipReason(rawValue: pushSkipped[index]) : nil, mail: mail,
                            mailSkipped: index < mailSkipped.count ? SkipReason(rawValue: mailSkipped[index]) : nil)))
            }
        }
        return Taken(entries: entries, unreadable: unreadable, count: rows.count, highest: highest)
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
