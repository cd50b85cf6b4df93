import Crypto
import EventLog
import Foundation
import InboxDomain
import PostgresClient

/// The bell: per person, the notifications about the person themselves, newest first, with their
/// read state, and a maintained unread count. Live (and inline), it also enqueues every
/// notification that is sent (the person's, and a shop's news) in `notification_outbox`; a replay
/// never does.
///
/// Which event makes which entry for whom is `NotificationPlanner` (docs/events.md). The facts an
/// event does not carry (a conversation's buyer, who saved a watch, whether a saved search still
/// exists) are kept in tables of this projection's own, so that it never reads another
/// projection's tables, which may stand at another checkpoint.
///
/// An entry's id is derived from the position of the event that made it and the person, so a
/// replay makes the same ids. "All read" and "all deleted" cover the entries made by events
/// before them in the log (by position), which makes the result the same however the log is cut
/// into batches, and when an inline apply ran ahead.
public struct BellProjection: Projection {
    public let name = "bell"
    public let version = 2
    public let tableNames = ["bell_entries", "bell_counters", "bell_conversations", "bell_favourites", "bell_saved_searches"]
    public let eventTypes: Set<String> = [
        ConversationStarted.eventType, ConversationClosedByBlock.eventType, MessageSent.eventType,
        OrderPaid.eventType, OrderShipped.eventType, OrderDelivered.eventType, OrderCancelled.eventType, OrderRefunded.eventType,
        WatchPriceChanged.eventType, WatchStatusChanged.eventType, FavouriteAdded.eventType, FavouriteRemoved.eventType,
        SavedSearchCreated.eventType, SavedSearchDeleted.eventType, SavedSearchMatched.eventType,
        SignedIn.eventType, PasswordChanged.eventType, SecondFactorEnabled.eventType, SecondFactorDisabled.eventType,
        EmailChanged.eventType, LegacyNotificationImported.eventType,
        NotificationRead.eventType, AllNotificationsRead.eventType, NotificationDeleted.eventType, AllNotificationsDeleted.eventType,
    ]

    public init() {}

    public func createTables(in context: ProjectionContext) throws {
        try context.connection.execute(
            """
            CREATE TABLE \(context.table("bell_entries")) (
                notification_id text        PRIMARY KEY,
                person_id       text        NOT NULL,
                category        text        NOT NULL,
                event           text        NOT NULL,
                ids             jsonb       NOT NULL,
                created_at      timestamptz NOT NULL,
                read_at         timestamptz,
                source_position bigint      NOT NULL
            );
            CREATE TABLE \(context.table("bell_counters")) (
                person_id    text    PRIMARY KEY,
                unread_count integer NOT NULL CHECK (unread_count >= 0),
                total_count  integer NOT NULL CHECK (total_count >= 0)
            );
            CREATE TABLE \(context.table("bell_conversations")) (
                conversation_id text    PRIMARY KEY,
                buyer_id        text    NOT NULL,
                shop_id         text,
                watch_id        text,
                kind            text    NOT NULL,
                closed          boolean NOT NULL DEFAULT false
            );
            CREATE TABLE \(context.table("bell_favourites")) (
                watch_id  text NOT NULL,
                person_id text NOT NULL,
                PRIMARY KEY (watch_id, person_id)
            );
            CREATE TABLE \(context.table("bell_saved_searches")) (
                saved_search_id text    PRIMARY KEY,
                person_id       text    NOT NULL,
                deleted         boolean NOT NULL DEFAULT false
            );
            """)
    }

    public func createIndexes(in context: ProjectionContext) throws {
        try context.connection.execute(
            """
            CREATE INDEX IF NOT EXISTS bell_entries_person ON \(context.table("bell_entries")) (person_id, created_at DESC, notification_id DESC);
            """)
    }

    /// The id of the bell entry (or shop notification) an event at `position` makes for `recipient`.
    public static func notificationId(position: Int64, recipient: String) -> String {
        SHA256.uuidString(naming: "wristler-bell:\(position):\(recipient)".utf8)
    }

    struct Entry {
        var id: String
        var personId: String
        var category: String
        var event: String
        var idsJSON: String
        var createdAt: Date
        var readAt: Date?
        var sourcePosition: Int64
        var existed: Bool
        var readChanged = false
        var deleted = false
    }

    struct Counter {
        var unread: Int32 = 0
        var total: Int32 = 0
    }

    struct OutboxRow {
        var notificationId: String
        var audience: String
        var recipientId: String
        var category: String
        var event: String
        var idsJSON: String
        var sourcePosition: Int64
        var createdAt: Date
    }

    public func apply(_ events: [ProjectedEvent], in context: ProjectionContext) throws {
        // What the batch needs to know first.
        var conversationIds: Set<String> = []
        var watchIds: Set<String> = []
        var searchIds: Set<String> = []
        var entryIds: Set<String> = []
        var readAllUpTo: [String: Int64] = [:]
        var deleteAllUpTo: [String: Int64] = [:]
        for event in events {
            switch event.payload {
            case let e as ConversationStarted: conversationIds.insert(e.conversationId)
            case let e as ConversationClosedByBlock: conversationIds.insert(e.conversationId)
            case let e as MessageSent: conversationIds.insert(e.conversationId)
            case let e as WatchPriceChanged: watchIds.insert(e.watchId)
            case let e as WatchStatusChanged: watchIds.insert(e.watchId)
            case let e as FavouriteAdded: watchIds.insert(e.watchId)
            case let e as FavouriteRemoved: watchIds.insert(e.watchId)
            case let e as SavedSearchCreated: searchIds.insert(e.savedSearchId)
            case let e as SavedSearchDeleted: searchIds.insert(e.savedSearchId)
            case let e as SavedSearchMatched: searchIds.insert(e.savedSearchId)
            case let e as NotificationRead: entryIds.insert(e.notificationId)
            case let e as NotificationDeleted: entryIds.insert(e.notificationId)
            case let e as LegacyNotificationImported: entryIds.insert(e.notificationId)
            case let e as AllNotificationsRead: readAllUpTo[e.personId] = event.record.position
            case let e as AllNotificationsDeleted: deleteAllUpTo[e.personId] = event.record.position
            default: break
            }
        }
        var facts = try Facts.load(
            conversations: conversationIds, watches: watchIds, searches: searchIds, context: context)

        // The notifications each event makes, in order; their entries' ids are needed before loading.
        var planned: [(event: ProjectedEvent, notifications: [PlannedNotification])] = []
        planned.reserveCapacity(events.count)
        for event in events {
            let notifications = NotificationPlanner.notifications(for: event.payload, facts: facts.planning(for: event.payload))
            facts.fold(event.payload)
            if notifications.isEmpty { continue }
            planned.append((event, notifications))
            // A derived id is new by construction (its event is applied once); a legacy entry keeps
            // the id it is given, which an import might send twice.
            if let legacy = event.payload as? LegacyNotificationImported { entryIds.insert(legacy.notificationId) }
        }

        var entries = try loadEntries(ids: entryIds, readAllUpTo: readAllUpTo, deleteAllUpTo: deleteAllUpTo, context: context)
        var byPerson: [String: [String]] = [:]
        for (id, entry) in entries { byPerson[entry.personId, default: []].append(id) }
        var created: [String] = []
        var outbox: [OutboxRow] = []
        var plannedIndex = 0

        for event in events {
            let position = event.record.position
            let at = event.record.recordedAt
            if plannedIndex < planned.count, planned[plannedIndex].event.record.position == position {
                for notification in planned[plannedIndex].notifications {
                    let idsJSON = Self.json(notification.ids)
                    switch notification.audience {
                    case .person(let person):
                        let id = Self.entryId(for: notification, event: event, person: person)
                        if entries[id] == nil {
                            var entry = Entry(
                                id: id, personId: person, category: notification.category.rawValue, event: notification.event,
                                idsJSON: idsJSON, createdAt: at, readAt: nil, sourcePosition: position, existed: false)
                            if let legacy = event.payload as? LegacyNotificationImported {
                                entry.createdAt = legacy.createdDate ?? at
                                entry.readAt = legacy.read ? entry.createdAt : nil
                            }
                            entries[id] = entry
                            byPerson[person, default: []].append(id)
                            created.append(id)
                        }
                        if notification.isSent && context.sendsNotifications {
                            outbox.append(
                                OutboxRow(
                                    notificationId: id, audience: "person", recipientId: person, category: notification.category.rawValue,
                                    event: notification.event, idsJSON: idsJSON, sourcePosition: position, createdAt: at))
                        }
                    case .shop(let shop):
                        guard context.sendsNotifications else { continue }
                        outbox.append(
                            OutboxRow(
                                notificationId: Self.notificationId(position: position, recipient: "shop:\(shop)"), audience: "shop",
                                recipientId: shop, category: notification.category.rawValue, event: notification.event,
                                idsJSON: idsJSON, sourcePosition: position, createdAt: at))
                    }
                }
                plannedIndex += 1
            }
            switch event.payload {
            case let e as NotificationRead:
                if var entry = entries[e.notificationId], entry.personId == e.personId, !entry.deleted, entry.readAt == nil {
                    entry.readAt = at
                    entry.readChanged = true
                    entries[e.notificationId] = entry
                }
            case let e as NotificationDeleted:
                if var entry = entries[e.notificationId], entry.personId == e.personId {
                    entry.deleted = true
                    entries[e.notificationId] = entry
                }
            case let e as AllNotificationsRead:
                for id in byPerson[e.personId] ?? [] {
                    guard var entry = entries[id], !entry.deleted, entry.readAt == nil, entry.sourcePosition < position else { continue }
                    entry.readAt = at
                    entry.readChanged = true
                    entries[id] = entry
                }
            case let e as AllNotificationsDeleted:
                for id in byPerson[e.personId] ?? [] {
                    guard var entry = entries[id], entry.sourcePosition < position else { continue }
                    entry.deleted = true
                    entries[id] = entry
                }
            default: break
            }
        }

        try facts.store(context: context)
        let changed = try store(entries: entries, created: created, context: context)
        try enqueue(outbox, context: context)
        // Live and inline, whoever keeps bell pages in memory learns whose changed when this commits.
        if context.mode != .replay { try BellChanges.announce(people: changed, on: context.connection) }
    }

    /// A legacy entry keeps its own id; every other is derived from its event and person.
    static func entryId(for notification: PlannedNotification, event: ProjectedEvent, person: String) -> String {
        if let legacy = event.payload as? LegacyNotificationImported { return legacy.notificationId }
        return notificationId(position: event.record.position, recipient: person)
    }

    private func loadEntries(
        ids: Set<String>, readAllUpTo: [String: Int64], deleteAllUpTo: [String: Int64], context: ProjectionContext
    ) throws -> [String: Entry] {
        var entries: [String: Entry] = [:]
        func add(_ rows: PostgresRows) throws {
            for row in rows {
                let id = try row.decode(String.self, "notification_id")
                if entries[id] != nil { continue }
                entries[id] = Entry(
                    id: id, personId: try row.decode(String.self, "person_id"), category: try row.decode(String.self, "category"),
                    event: try row.decode(String.self, "event"), idsJSON: "", createdAt: try row.decode(Date.self, "created_at"),
                    readAt: try row.decode(Date?.self, "read_at"), sourcePosition: try row.decode(Int64.self, "source_position"),
                    existed: true)
            }
        }
        let columns = "notification_id, person_id, category, event, created_at, read_at, source_position"
        let table = context.table("bell_entries")
        if !ids.isEmpty {
            try add(try context.connection.query("SELECT \(columns) FROM \(table) WHERE notification_id = ANY($1)", Array(ids)))
        }
        if !readAllUpTo.isEmpty {
            let people = Array(readAllUpTo.keys)
            try add(
                try context.connection.query(
                    """
                    SELECT \(columns) FROM \(table) t JOIN unnest($1::text[], $2::bigint[]) AS u(person, up_to)
                        ON t.person_id = u.person AND t.source_position < u.up_to AND t.read_at IS NULL
                    """, people, people.map { readAllUpTo[$0]! }))
        }
        if !deleteAllUpTo.isEmpty {
            let people = Array(deleteAllUpTo.keys)
            try add(
                try context.connection.query(
                    """
                    SELECT \(columns) FROM \(table) t JOIN unnest($1::text[], $2::bigint[]) AS u(person, up_to)
                        ON t.person_id = u.person AND t.source_position < u.up_to
                    """, people, people.map { deleteAllUpTo[$0]! }))
        }
        return entries
    }

    /// Writes the batch's entries and counters; returns the people whose bell changed.
    private func store(entries: [String: Entry], created: [String], context: ProjectionContext) throws -> [String] {
        let connection = context.connection
        var counters: [String: Counter] = [:]
        var inserts: [Entry] = []
        var reads: [Entry] = []
        var deletes: [Entry] = []
        for id in created {
            guard let entry = entries[id], !entry.deleted else { continue }
            inserts.append(entry)
        }
        for entry in entries.values where entry.existed {
            if entry.deleted {
                deletes.append(entry)
                counters[entry.personId, default: Counter()].total -= 1
                // An entry read in this batch was counted unread before it.
                if entry.readAt == nil || entry.readChanged { counters[entry.personId, default: Counter()].unread -= 1 }
            } else if entry.readChanged {
                reads.append(entry)
                counters[entry.personId, default: Counter()].unread -= 1
            }
        }
        if !deletes.isEmpty {
            try connection.query("DELETE FROM \(context.table("bell_entries")) WHERE notification_id = ANY($1)", deletes.map(\.id))
        }
        if !reads.isEmpty {
            try connection.query(
                """
                UPDATE \(context.table("bell_entries")) t SET read_at = u.at
                FROM unnest($1::text[], $2::timestamptz[]) AS u(id, at) WHERE t.notification_id = u.id
                """, reads.map(\.id), reads.map { $0.readAt! })
        }
        if !inserts.isEmpty {
            // Counted by what the table took: an entry already there (an event applied twice by
            // mistake) is neither written nor counted again.
            let inserted = try connection.query(
                """
                INSERT INTO \(context.table("bell_entries"))
                    (notification_id, person_id, category, event, ids, created_at, read_at, source_position)
                SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::jsonb[], $6::timestamptz[],
                    $7::timestamptz[], $8::bigint[])
                ON CONFLICT (notification_id) DO NOTHING
                RETURNING person_id, read_at IS NULL AS unread
                """, inserts.map(\.id), inserts.map(\.personId), inserts.map(\.category), inserts.map(\.event),
                inserts.map { PostgresRawJSON($0.idsJSON) }, inserts.map(\.createdAt), inserts.map(\.readAt), inserts.map(\.sourcePosition))
            for row in inserted {
                let person = try row.decode(String.self, at: 0)
                counters[person, default: Counter()].total += 1
                if try row.decode(Bool.self, at: 1) { counters[person, default: Counter()].unread += 1 }
            }
        }
        // Everybody who got an entry has a counter row, whatever the batch nets out to, so the rows
        // do not depend on where the log is cut into batches.
        for id in created { if let entry = entries[id], counters[entry.personId] == nil { counters[entry.personId] = Counter() } }
        let people = Array(counters.keys)
        if !people.isEmpty {
            // Rows first, then the changes: a negative change inserted as a new row would fail the
            // counters' checks before the conflict with the existing row is noticed.
            try connection.query(
                """
                INSERT INTO \(context.table("bell_counters")) (person_id, unread_count, total_count)
                SELECT p, 0, 0 FROM unnest($1::text[]) AS p ON CONFLICT (person_id) DO NOTHING
                """, people)
            try connection.query(
                """
                UPDATE \(context.table("bell_counters")) t
                SET unread_count = t.unread_count + u.unread, total_count = t.total_count + u.total
                FROM unnest($1::text[], $2::int[], $3::int[]) AS u(person, unread, total) WHERE t.person_id = u.person
                """, people, people.map { counters[$0]!.unread }, people.map { counters[$0]!.total })
        }
        return people
    }

    private func enqueue(_ rows: [OutboxRow], context: ProjectionContext) throws {
        if rows.isEmpty { return }
        try context.connection.query(
            """
            INSERT INTO notification_outbox
                (notification_id, audience, recipient_id, category, event, ids, source_position, created_at)
            SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::jsonb[], $7::bigint[], $8::timestamptz[])
            ON CONFLICT (notification_id, audience, recipient_id) DO NOTHING
            """, rows.map(\.notificationId), rows.map(\.audience), rows.map(\.recipientId), rows.map(\.category), rows.map(\.event),
            rows.map { PostgresRawJSON($0.idsJSON) }, rows.map(\.sourcePosition), rows.map(\.createdAt))
    }

    /// The ids as a JSON object with sorted keys, so the same ids are always the same text.
    static func json(_ ids: [String: String]) -> String {
        var text = JSONText(capacity: 96)
        var first = true
        text.raw(UInt8(ascii: "{"))
        for key in ids.keys.sorted() {
            text.key(key, first: &first)
            text.string(ids[key]!)
        }
        text.raw(UInt8(ascii: "}"))
        return text.string
    }
}
