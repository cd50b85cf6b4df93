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
    public var eventTypes: Set<String> { PreferencesFold.rules.handledTypes }
    public var ignoredEventTypes: Set<String> { PreferencesFold.rules.ignoredTypes }

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
                -- NULL: erased (its person's data key is gone; sql/029).
                name            text,
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

    public func apply(_ events: [ProjectedEvent], in context: ProjectionContext) throws {
        let searchIds = PreferencesFold.keys(of: events)
        let stored = searchIds.isEmpty ? [:] : try loadSavedSearches(Array(searchIds), context: context)
        let fold = try PreferencesFold.fold(events, searches: stored)
        try storeSwitches(fold.switches, context: context)
        try storeSavedSearches(fold.writtenSearches, context: context)
        // The names of the searches of people erased, stored before.
        if !fold.erasedPeople.isEmpty {
            try context.connection.query(
                "UPDATE \(context.table("saved_searches")) SET name = NULL WHERE person_id = ANY($1::text[]) AND name IS NOT NULL", Array(fold.erasedPeople))
        }
    }

    private func storeSwitches(_ switches: [PreferencesFold.SwitchKey: (enabled: Bool, position: Int64)], context: ProjectionContext) throws {
        if switches.isEmpty { return }
        let keys = Array(switches.keys)
        try context.connection.query(
            """
            INSERT INTO \(context.table("notification_preferences")) AS t (person_id, category, channel, enabled, position)
            SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::boolean[], $5::bigint[])
            ON CONFLICT (person_id, category, channel) DO UPDATE SET enabled = excluded.enabled, position = excluded.position
            WHERE excluded.position > t.position
            """, keys.map(\.person), keys.map(\.category), keys.map(\.channel), keys.map { switches[$0]!.enabled },
            keys.map { switches[$0]!.position })
    }

    private func storeSavedSearches(_ written: [PreferencesFold.SavedSearchRow], context: ProjectionContext) throws {
        if written.isEmpty { return }
        try context.connection.query(
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

    private func loadSavedSearches(_ ids: [String], context: ProjectionContext) throws -> [String: PreferencesFold.SavedSearchRow] {
        let rows = try context.connection.query(
            """
            SELECT saved_search_id, person_id, name, query, interval, push, created_at, updated_at, deleted, position
            FROM \(context.table("saved_searches")) WHERE saved_search_id = ANY($1)
            """, ids)
        var result: [String: PreferencesFold.SavedSearchRow] = [:]
        for row in rows {
            let id = try row.decode(String.self, "saved_search_id")
            result[id] = PreferencesFold.SavedSearchRow(
                id: id, personId: try row.decode(String.self, "person_id"), name: try row.decode(String.self, "name"),
                queryJSON: try row.decode(PostgresRawJSON.self, "query").text, interval: try row.decode(String.self, "interval"),
                push: try row.decode(Bool.self, "push"), createdAt: try row.decode(Date.self, "created_at"),
                updatedAt: try row.decode(Date.self, "updated_at"), deleted: try row.decode(Bool.self, "deleted"),
                position: try row.decode(Int64.self, "position"))
        }
        return result
    }
}
