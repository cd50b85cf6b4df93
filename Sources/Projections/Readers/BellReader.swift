import Foundation
import PostgresClient

/// One entry of a person's bell.
public struct BellEntry: Sendable, Hashable {
    public var id: String
    public var category: String
    public var event: String
    /// The ids its screen needs, as the JSON object stored (string values only).
    public var idsJSON: String
    public var createdAt: Date
    public var readAt: Date?
    public var isRead: Bool { readAt != nil }

    public var ids: [String: String] { (try? JSONDecoder().decode([String: String].self, from: Data(idsJSON.utf8))) ?? [:] }

    init(row: PostgresRow) throws {
        id = try row.decode(String.self, "notification_id")
        category = try row.decode(String.self, "category")
        event = try row.decode(String.self, "event")
        idsJSON = try row.decode(PostgresRawJSON.self, "ids").text
        createdAt = try row.decode(Date.self, "created_at")
        readAt = try row.decode(Date?.self, "read_at")
    }
}

/// Reads a person's bell from the live tables: newest first, in keyset pages, and the maintained
/// unread count (never counted at read time).
public enum BellReader {
    /// A page of `person`'s bell after `cursor`. `unread` narrows it to unread (true) or read (false)
    /// entries. Entries added while somebody walks the pages are newer than every cursor, so a walk
    /// neither skips nor repeats an entry.
    public static func page(
        person: String, unread: Bool? = nil, after cursor: KeysetCursor? = nil, limit: Int, on connection: PostgresConnection
    ) throws -> KeysetPage<BellEntry> {
        try pageAndUnreadCount(person: person, unread: unread, after: cursor, limit: limit, on: connection).page
    }

    /// A page and the unread count, in one round trip (pipeline mode).
    public static func pageAndUnreadCount(
        person: String, unread: Bool? = nil, after cursor: KeysetCursor? = nil, limit: Int, on connection: PostgresConnection
    ) throws -> (page: KeysetPage<BellEntry>, unreadCount: Int) {
        let limit = max(1, limit)
        let filter = unread.map { $0 ? "AND read_at IS NULL" : "AND read_at IS NOT NULL" } ?? ""
        let results = try connection.pipeline([
            PostgresStatement(
                """
                SELECT notification_id, category, event, ids, created_at, read_at,
                    (extract(epoch FROM created_at) * 1000000)::bigint AS created_us
                FROM bell_entries
                WHERE person_id = $1 \(filter)
                  AND ($2::bigint IS NULL
                       OR (created_at, notification_id) < (timestamptz 'epoch' + $2::bigint * interval '1 microsecond', $3::text))
                ORDER BY created_at DESC, notification_id DESC
                LIMIT $4
                """, person, cursor?.key, cursor?.id, Int64(limit + 1)),
            PostgresStatement("SELECT coalesce((SELECT unread_count FROM bell_counters WHERE person_id = $1), 0)", person),
        ])
        let read = try results[0].map { row -> (row: BellEntry, key: Int64, id: String) in
            let entry = try BellEntry(row: row)
            return (entry, try row.decode(Int64.self, "created_us"), entry.id)
        }
        return (KeysetPage(reading: read, limit: limit), Int(try results[1].scalar(Int32.self)))
    }

    /// One entry of `person`'s bell; nil when there is none with that id, or it is somebody else's.
    public static func entry(id: String, person: String, on connection: PostgresConnection) throws -> BellEntry? {
        try connection.query(
            "SELECT notification_id, category, event, ids, created_at, read_at FROM bell_entries WHERE notification_id = $1 AND person_id = $2",
            id, person
        ).first.map(BellEntry.init(row:))
    }

    /// The person's unread count, as maintained by the bell projection.
    public static func unreadCount(person: String, on connection: PostgresConnection) throws -> Int {
        Int(try connection.query("SELECT unread_count FROM bell_counters WHERE person_id = $1", person).first?.decode(Int32.self, "unread_count") ?? 0)
    }
}
