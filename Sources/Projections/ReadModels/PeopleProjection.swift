import EventLog
import Foundation
import InboxDomain
import PostgresClient

/// Who works at which shop, who blocked whom, and which accounts Wristler blocked: what the fan-out
/// (a shop's news goes to its people) and the reminders (not for a blocked buyer) need.
public struct PeopleProjection: Projection {
    public let name = "people"
    public let version = 1
    public let tableNames = ["shop_members", "person_blocks", "blocked_accounts"]
    public var eventTypes: Set<String> { PeopleFold.rules.handledTypes }
    public var ignoredEventTypes: Set<String> { PeopleFold.rules.ignoredTypes }

    public init() {}

    public func createTables(in context: ProjectionContext) throws {
        try context.connection.execute(
            """
            CREATE TABLE \(context.table("shop_members")) (
                shop_id   text NOT NULL,
                person_id text NOT NULL,
                PRIMARY KEY (shop_id, person_id)
            );
            CREATE TABLE \(context.table("person_blocks")) (
                blocker_id text NOT NULL,
                blocked_id text NOT NULL,
                PRIMARY KEY (blocker_id, blocked_id)
            );
            CREATE TABLE \(context.table("blocked_accounts")) (
                person_id  text        PRIMARY KEY,
                reason     text,
                blocked_at timestamptz NOT NULL
            );
            """)
    }

    public func createIndexes(in context: ProjectionContext) throws {
        try context.connection.execute(
            """
            CREATE INDEX IF NOT EXISTS shop_members_person ON \(context.table("shop_members")) (person_id);
            CREATE INDEX IF NOT EXISTS person_blocks_blocked ON \(context.table("person_blocks")) (blocked_id);
            """)
    }

    public func apply(_ events: [ProjectedEvent], in context: ProjectionContext) throws {
        let fold = try PeopleFold.fold(events)
        let connection = context.connection
        try write(fold.members, table: context.table("shop_members"), columns: ("shop_id", "person_id"), on: connection)
        // Whose seller lists cover other shops now, for whoever keeps them in memory.
        if context.mode != .replay { try ThreadChanges.announce(Set(fold.members.keys.map { ThreadChanges.member($0.second) }), on: connection) }
        try write(fold.blocks, table: context.table("person_blocks"), columns: ("blocker_id", "blocked_id"), on: connection)
        let blockedAccounts = fold.blockedAccounts
        if !blockedAccounts.isEmpty {
            let ids = Array(blockedAccounts.keys)
            try connection.query(
                """
                INSERT INTO \(context.table("blocked_accounts")) (person_id, reason, blocked_at)
                SELECT * FROM unnest($1::text[], $2::text[], $3::timestamptz[])
                ON CONFLICT (person_id) DO NOTHING
                """, ids, ids.map { blockedAccounts[$0]!.reason }, ids.map { blockedAccounts[$0]!.at })
        }
        if !fold.erasedPeople.isEmpty {
            try connection.query(
                "UPDATE \(context.table("blocked_accounts")) SET reason = NULL WHERE person_id = ANY($1::text[]) AND reason IS NOT NULL",
                Array(fold.erasedPeople))
        }
    }

    private func write(_ pairs: [PeopleFold.Pair: Bool], table: String, columns: (String, String), on connection: PostgresConnection) throws {
        let present = pairs.filter(\.value).map(\.key)
        let absent = pairs.filter { !$0.value }.map(\.key)
        if !absent.isEmpty {
            try connection.query(
                "DELETE FROM \(table) t USING unnest($1::text[], $2::text[]) AS u(a, b) WHERE t.\(columns.0) = u.a AND t.\(columns.1) = u.b",
                absent.map(\.first), absent.map(\.second))
        }
        if !present.isEmpty {
            try connection.query(
                "INSERT INTO \(table) (\(columns.0), \(columns.1)) SELECT * FROM unnest($1::text[], $2::text[]) ON CONFLICT DO NOTHING",
                present.map(\.first), present.map(\.second))
        }
    }
}
