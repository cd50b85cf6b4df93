import EventLog
import Foundation
import InboxDomain
import PostgresClient

/// What each person chose: the switches they changed (every other one is at its default, on) and
/// their saved searches. `PreferenceDecisions` reads these tables to answer which channels a
/// notification goes to.
///
/// Rows remember the log position of the event that last set them and only take a later one,
/// so an inline apply that ran ahead of the async projector is never undone by an older event.
public struct PreferencesProjection: Projection {
    public let name = "preferences"
    public let version = 1
    public let tableNames = ["notification_preferences", "saved_searches"]
    public let eventTypes: Set<String> = [
        NotificationPreferenceChanged.eventType, SavedSearchCreated.eventType, SavedSearchChanged.eventType,
        SavedSearchDeleted.eventType,
    ]

    public init() {}

    public func createTables(in context: ProjectionContext) throws {
        try context.connection.execute(
            """
            CREATE TABLE \(context.table("notification_preferences")) (
                person_id  text    NOT NULL,
                category   text    NOT NULL,
                channel    text    NOT NULL,
                enabled    boolean NOT NULL,
                position   bigint  NOT NULL,
                PRIMARY KEY (person_id, category, channel)
            );
            CREATE TABLE \(context.table("saved_searches")) (
                saved_search_id text        PRIMARY KEY,
                person_id       text        NOT NULL,
                name            text        NOT NULL,
                query           jsonb       NOT NULL,
                interval        text        NOT NULL,
                push            boolean     NOT NULL,
                created_at      timestamptz NOT NULL,
                updated_at      timestamptz NOT NULL,
                deleted         boolean     NOT NULL DEFAULT false,
                position        bigint      NOT NULL
            );
            """)
    }

    public func createIndexes(in context: ProjectionContext) throws {
        try context.connection.execute(
            """
            CREATE INDEX IF NOT EXISTS saved_searches_person ON \(context.table("saved_searches")) (person_id, created_at, saved_search_id)
                WHERE NOT deleted;
            """)
    }

    private struct SwitchKey: Hashable {
        let person: String
        let category: String
        let channel: String
    }

    struct SavedSearchRow {
        var id: String
        var personId: String
        var name: String
        var queryJSON: String
        var interval: String
        var push: Bool
        var createdAt: Date
        var updatedAt: Date
        var deleted: Bool
        var position: Int64
    }

    public func apply(_ events: [ProjectedEvent], in context: ProjectionContext) throws {
        var switches: [SwitchKey: (enabled: Bool, position: Int64)] = [:]
        var searchIds: Set<String> = []
        for event in events {
            switch event.payload {
            case let change as NotificationPreferenceChanged:
                switches[SwitchKey(person: change.personId, category: change.category.rawValue, channel: change.channel.rawValue)] =
                    (change.enabled, event.record.position)
            case let created as SavedSearchCreated: searchIds.insert(created.savedSearchId)
            case let changed as SavedSearchChanged: searchIds.insert(changed.savedSearchId)
            case let deleted as SavedSearchDeleted: searchIds.insert(deleted.savedSearchId)
            default: break
            }
        }
        let connection = context.connection
        if !switches.isEmpty {
            let keys = Array(switches.keys)
            try connection.query(
                """
                INSERT INTO \(context.table("notification_preferences")) AS t (person_id, category, channel, enabled, position)
                SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::boolean[], $5::bigint[])
                ON CONFLICT (person_id, category, channel) DO UPDATE SET enabled = excluded.enabled, position = excluded.position
                WHERE excluded.position > t.position
                """, keys.map(\.person), keys.map(\.category), keys.map(\.channel), keys.map { switches[$0]!.enabled },
                keys.map { switches[$0]!.position })
        }
        if searchIds.isEmpty { return }
        var rows = try loadSavedSearches(Array(searchIds), context: context)
        var touched: Set<String> = []
        for event in events {
            let position = event.record.position
            switch event.payload {
            case let created as SavedSearchCreated:
                guard rows[created.savedSearchId] == nil else { continue }
                rows[created.savedSearchId] = SavedSearchRow(
                    id: created.savedSearchId, personId: created.personId, name: created.name, queryJSON: try Self.json(created.query),
                    interval: created.interval.rawValue, push: created.push, createdAt: event.record.recordedAt,
                    updatedAt: event.record.recordedAt, deleted: false, position: position)
                touched.insert(created.savedSearchId)
            case let changed as SavedSearchChanged:
                guard var row = rows[changed.savedSearchId], position > row.position, !row.deleted else { continue }
                if let name = changed.name { row.name = name }
                if let query = changed.query { row.queryJSON = try Self.json(query) }
                if let interval = changed.interval { row.interval = interval.rawValue }
                if let push = changed.push { row.push = push }
                row.updatedAt = event.record.recordedAt
                row.position = position
                rows[changed.savedSearchId] = row
                touched.insert(changed.savedSearchId)
            case let deleted as SavedSearchDeleted:
                guard var row = rows[deleted.savedSearchId], position > row.position else { continue }
                row.deleted = true
                row.updatedAt = event.record.recordedAt
                row.position = position
                rows[deleted.savedSearchId] = row
                touched.insert(deleted.savedSearchId)
            default: break
            }
        }
        let written = touched.compactMap { rows[$0] }
        if written.isEmpty { return }
        try connection.query(
            """
            INSERT INTO \(context.table("saved_searches")) AS t
                (saved_search_id, person_id, name, query, interval, push, created_at, updated_at, deleted, position)
            SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::jsonb[], $5::text[], $6::boolean[], $7::timestamptz[],
                $8::timestamptz[], $9::boolean[], $10::bigint[])
            ON CONFLICT (saved_search_id) DO UPDATE SET name = excluded.name, query = excluded.query, interval = excluded.interval,
                push = excluded.push, updated_at = excluded.updated_at, deleted = excluded.deleted, position = excluded.position
            WHERE excluded.position > t.position
            """, written.map(\.id), written.map(\.personId), written.map(\.name), written.map { PostgresRawJSON($0.queryJSON) },
            written.map(\.interval), written.map(\.push), written.map(\.createdAt), written.map(\.updatedAt), written.map(\.deleted),
            written.map(\.position))
    }

    private func loadSavedSearches(_ ids: [String], context: ProjectionContext) throws -> [String: SavedSearchRow] {
        let rows = try context.connection.query(
            """
            SELECT saved_search_id, person_id, name, query, interval, push, created_at, updated_at, deleted, position
            FROM \(context.table("saved_searches")) WHERE saved_search_id = ANY($1)
            """, ids)
        var result: [String: SavedSearchRow] = [:]
        for row in rows {
            let id = try row.decode(String.self, "saved_search_id")
            result[id] = SavedSearchRow(
                id: id, personId: try row.decode(String.self, "person_id"), name: try row.decode(String.self, "name"),
                queryJSON: try row.decode(PostgresRawJSON.self, "query").text, interval: try row.decode(String.self, "interval"),
                push: try row.decode(Bool.self, "push"), createdAt: try row.decode(Date.self, "created_at"),
                updatedAt: try row.decode(Date.self, "updated_at"), deleted: try row.decode(Bool.self, "deleted"),
                position: try row.decode(Int64.self, "position"))
        }
        return result
    }

    static func json(_ value: JSONValue) throws -> String {
        String(decoding: try JSONEncoder().encode(value), as: UTF8.self)
    }
}
