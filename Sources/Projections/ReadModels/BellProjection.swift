import Crypto
import EventLog
import Foundation
import InboxDomain
import NotificationOutbox
import PostgresClient

/// The bell: per person, the notifications about the person themselves, newest first, with their
/// read state, and a maintained unread count. Live (and inline), it also decides how every
/// notification that is sent (the person's, and a shop's news) reaches each person it is for, and
/// enqueues it in `notification_outbox` (`NotificationOutbox`); a replay never does.
///
/// Which event makes which entry for whom is `NotificationPlanner` (docs/events.md). The facts an
/// event does not carry (a conversation's buyer, who saved a watch, whether a saved search still
/// exists) and the facts a decision reads (who works at a shop, people's switches and saved
/// searches, blocked accounts) are kept in tables of this projection's own, so that it never
/// reads another projection's tables, which may stand at another checkpoint: every notification is
/// decided with the facts as they stood at its event's place in the log (docs/fanout.md).
///
/// An entry's id is derived from the position of the event that made it and the person, so a
/// replay makes the same ids. "All read" and "all deleted" cover the entries made by events
/// before them in the log (by position), which makes the result the same however the log is cut
/// into batches, and when an inline apply ran ahead.
public struct BellProjection: StagedProjection {
    public let name = "bell"
    public let version = 3
    public let tableNames = [
        "bell_entries", "bell_counters", "bell_conversations", "bell_favourites", "bell_saved_searches", "bell_shop_members", "bell_switches",
        "bell_blocked_accounts",
    ]
    public var eventTypes: Set<String> { BellFold.rules.handledTypes }
    public var ignoredEventTypes: Set<String> { BellFold.rules.ignoredTypes }

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
                deleted         boolean NOT NULL DEFAULT false,
                interval        text    NOT NULL,
                push            boolean NOT NULL
            );
            CREATE TABLE \(context.table("bell_shop_members")) (
                shop_id   text NOT NULL,
                person_id text NOT NULL,
                PRIMARY KEY (shop_id, person_id)
            );
            CREATE TABLE \(context.table("bell_switches")) (
                person_id text    NOT NULL,
                category  text    NOT NULL,
                channel   text    NOT NULL,
                enabled   boolean NOT NULL,
                PRIMARY KEY (person_id, category, channel)
            );
            CREATE TABLE \(context.table("bell_blocked_accounts")) (
                person_id text PRIMARY KEY
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

    public func loads(for events: [ProjectedEvent], in context: ProjectionContext) -> [PostgresStatement] {
        let keys = BellFold.keys(of: events)
        return factLoads(keys, sending: context.sendsNotifications, context: context) + entryLoads(keys, context: context)
    }

    public func writes(for events: [ProjectedEvent], loaded: [PostgresRows], in context: ProjectionContext) throws -> [PostgresStatement] {
        let keys = BellFold.keys(of: events)
        var loaded = loaded[...]
        let facts = try facts(keys, sending: context.sendsNotifications, from: &loaded)
        let entries = try entries(keys, from: &loaded)
        let fold = try BellFold.fold(events, facts: facts, entries: entries, sendsNotifications: context.sendsNotifications)
        let writes = fold.writes
        let people = writes.people
        // Live and inline, whoever keeps bell pages in memory learns whose changed when this
        // commits: everybody whose counters the batch moves, which is everybody who got, read or
        // lost an entry.
        let announcements = context.mode == .replay ? [] : Announcement.statements(people, channel: BellChanges.channel)
        return factWrites(fold.facts, context: context) + entryWrites(writes, people: people, context: context)
            + [NotificationOutbox.insert(fold.outbox)].compactMap { $0 } + announcements
    }

    private static let entryColumns = "notification_id, person_id, category, event, created_at, read_at, source_position"

    /// The reads of the entries a batch names, and per person those its last "all read" (unread
    /// ones) and "all deleted" cover; `entries(_:from:)` takes their results in this order.
    private func entryLoads(_ keys: BellFold.Keys, context: ProjectionContext) -> [PostgresStatement] {
        let columns = Self.entryColumns
        let table = context.table("bell_entries")
        var statements: [PostgresStatement] = []
        if !keys.entries.isEmpty {
            statements.append(PostgresStatement("SELECT \(columns) FROM \(table) WHERE notification_id = ANY($1)", Array(keys.entries)))
        }
        let readAllUpTo = keys.readAllUpTo, deleteAllUpTo = keys.deleteAllUpTo
        if !readAllUpTo.isEmpty {
            let people = Array(readAllUpTo.keys)
            statements.append(
                PostgresStatement(
                    """
                    SELECT \(columns) FROM \(table) t JOIN unnest($1::text[], $2::bigint[]) AS u(person, up_to)
                        ON t.person_id = u.person AND t.source_position < u.up_to AND t.read_at IS NULL
                    """, people, people.map { readAllUpTo[$0]! }))
        }
        if !deleteAllUpTo.isEmpty {
            let people = Array(deleteAllUpTo.keys)
            statements.append(
                PostgresStatement(
                    """
                    SELECT \(columns) FROM \(table) t JOIN unnest($1::text[], $2::bigint[]) AS u(person, up_to)
                        ON t.person_id = u.person AND t.source_position < u.up_to
                    """, people, people.map { deleteAllUpTo[$0]! }))
        }
        return statements
    }

    /// The entries out of `entryLoads`' results, taken from the front of `loaded`.
    private func entries(_ keys: BellFold.Keys, from loaded: inout ArraySlice<PostgresRows>) throws -> [String: BellFold.Entry] {
        var entries: [String: BellFold.Entry] = [:]
        let reads = (keys.entries.isEmpty ? 0 : 1) + (keys.readAllUpTo.isEmpty ? 0 : 1) + (keys.deleteAllUpTo.isEmpty ? 0 : 1)
        for _ in 0..<reads {
            for row in loaded.removeFirst() {
                let id = try row.decode(String.self, "notification_id")
                if entries[id] != nil { continue }
                entries[id] = BellFold.Entry(
                    id: id, personId: try row.decode(String.self, "person_id"), category: try row.decode(String.self, "category"),
                    event: try row.decode(String.self, "event"), idsJSON: "", createdAt: try row.decode(Date.self, "created_at"),
                    readAt: try row.decode(Date?.self, "read_at"), sourcePosition: try row.decode(Int64.self, "source_position"),
                    existed: true)
            }
        }
        return entries
    }

    /// The writes of the batch's entries and counters (`people`: `writes.people`).
    private func entryWrites(_ writes: BellFold.Writes, people: [String], context: ProjectionContext) -> [PostgresStatement] {
        var statements: [PostgresStatement] = []
        let inserts = writes.inserts, reads = writes.reads, deletes = writes.deletes
        if !deletes.isEmpty {
            statements.append(PostgresStatement("DELETE FROM \(context.table("bell_entries")) WHERE notification_id = ANY($1)", deletes.map(\.id)))
        }
        if !reads.isEmpty {
            statements.append(
                PostgresStatement(
                    """
                    UPDATE \(context.table("bell_entries")) t SET read_at = u.at
                    FROM unnest($1::text[], $2::timestamptz[]) AS u(id, at) WHERE t.notification_id = u.id
                    """, reads.map(\.id), reads.map { $0.readAt! }))
        }
        if people.isEmpty { return statements }
        // Rows first, then the changes: a negative change inserted as a new row would fail the
        // counters' checks before the conflict with the existing row is noticed.
        statements.append(
            PostgresStatement(
                """
                INSERT INTO \(context.table("bell_counters")) (person_id, unread_count, total_count)
                SELECT p, 0, 0 FROM unnest($1::text[]) AS p ON CONFLICT (person_id) DO NOTHING
                """, people))
        let unread = people.map { writes.counters[$0]?.unread ?? 0 }, total = people.map { writes.counters[$0]?.total ?? 0 }
        if inserts.isEmpty {
            statements.append(
                PostgresStatement(
                    """
                    UPDATE \(context.table("bell_counters")) t
                    SET unread_count = t.unread_count + u.unread, total_count = t.total_count + u.total
                    FROM unnest($1::text[], $2::int[], $3::int[]) AS u(person, unread, total) WHERE t.person_id = u.person
                    """, people, unread, total))
            return statements
        }
        // The entries are counted by what the table took, in the same statement: an entry already
        // there (an event applied twice by mistake) is neither written nor counted again.
        statements.append(
            PostgresStatement(
                """
                WITH inserted AS (
                    INSERT INTO \(context.table("bell_entries"))
                        (notification_id, person_id, category, event, ids, created_at, read_at, source_position)
                    SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::jsonb[], $6::timestamptz[],
                        $7::timestamptz[], $8::bigint[])
                    ON CONFLICT (notification_id) DO NOTHING
                    RETURNING person_id, read_at IS NULL AS unread
                ), changes AS (
                    SELECT person_id AS person, unread::int AS unread, 1 AS total FROM inserted
                    UNION ALL
                    SELECT * FROM unnest($9::text[], $10::int[], $11::int[])
                ), summed AS (
                    SELECT person, sum(unread)::int AS unread, sum(total)::int AS total FROM changes GROUP BY person
                )
                UPDATE \(context.table("bell_counters")) t
                SET unread_count = t.unread_count + s.unread, total_count = t.total_count + s.total
                FROM summed s WHERE t.person_id = s.person
                """, inserts.map(\.id), inserts.map(\.personId), inserts.map(\.category), inserts.map(\.event),
                inserts.map { PostgresRawJSON($0.idsJSON) }, inserts.map(\.createdAt), inserts.map(\.readAt), inserts.map(\.sourcePosition),
                people, unread, total))
        return statements
    }
}

extension BellFold.Writes {
    /// Everybody whose counter row the batch touches: whose counters move, and whoever gets an
    /// entry (the fold gives each of them a counter change too, but the entries must not depend
    /// on it).
    var people: [String] { Array(Set(counters.keys).union(inserts.map(\.personId))) }
}
