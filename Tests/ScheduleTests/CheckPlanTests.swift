import Foundation
import InboxTesting
import PostgresClient
import Projections
import Schedule
import Testing

/// The check costs in proportion to the waiting threads: the plan reads `conversations` through
/// `conversations_waiting` and looks everything else up by key, and the index is there however the
/// live tables came to be.
@Suite(.serialized) struct CheckPlanTests {
    @Test func theCheckReadsTheWaitingThreadsThroughTheirIndexAndLooksTheRestUpByKey() async throws {
        try await withTestDatabaseOnAClusterOfItsOwn { db in
            try await db.project()
            // A long history: 100,000 threads over 400 days, half of them ending on the buyer's
            // message (the worst case for the index), every watch known and half of them sold.
            // One long writing transaction, so on a cluster of its own (it held back the log's
            // readers of the other tests for 10 s and more on the shared one).
            try await db.client.withConnection { connection in
                _ = try connection.execute(
                    """
                    INSERT INTO conversations (conversation_id, kind, buyer_id, shop_id, watch_id, started_at, last_message_id,
                        last_message_seq, last_message_at, last_message_side, message_count)
                    SELECT 'c' || i, 'watch', 'b' || i, 's' || (i % 2000), 'w' || i, now() - interval '401 days', 'm' || i, 2,
                        now() - (i % 400) * interval '1 day' - interval '1 hour', CASE WHEN i % 2 = 0 THEN 'buyer' ELSE 'seller' END, 2
                    FROM generate_series(1, 100000) AS i;
                    INSERT INTO thread_sides (conversation_id, side, owner_id, last_activity_at)
                    SELECT 'c' || i, side, CASE side WHEN 'buyer' THEN 'b' || i ELSE 's' || (i % 2000) END, now()
                    FROM generate_series(1, 100000) AS i, unnest(ARRAY['buyer', 'seller']) AS side;
                    INSERT INTO thread_watches (watch_id, shop_id, status)
                    SELECT 'w' || i, 's' || (i % 2000), CASE WHEN i % 4 < 2 THEN 'sold' ELSE 'for_sale' END FROM generate_series(1, 100000) AS i;
                    INSERT INTO blocked_accounts (person_id, blocked_at) SELECT 'b' || i, now() FROM generate_series(1, 100000, 50) AS i;
                    INSERT INTO shop_reminders (shop_id, last_reminded_at, last_notification_id)
                    SELECT 's' || i, now() - interval '3 hours', 'n' FROM generate_series(1, 2000) AS i;
                    INSERT INTO shop_reminded_messages (message_id, shop_id, conversation_id, message_at, reminded_at)
                    SELECT 'm' || i, 's' || (i % 2000), 'c' || i, now() - interval '1 day', now() FROM generate_series(2, 100000, 40) AS i;
                    ANALYZE conversations; ANALYZE thread_sides; ANALYZE thread_watches; ANALYZE blocked_accounts;
                    ANALYZE shop_reminders; ANALYZE shop_reminded_messages;
                    """)
            }
            let now = Date()
            let plan = try await db.client.withConnection { connection in
                let query = ShopReminders.waitingQuery
                    .replacingOccurrences(of: "$1", with: "'\(now.addingTimeInterval(-14 * day).postgresText!)'::timestamptz")
                    .replacingOccurrences(of: "$2", with: "'\(now.addingTimeInterval(-2 * hour).postgresText!)'::timestamptz")
                return try connection.query("EXPLAIN " + query).map { try $0.decode(String.self, at: 0) }.joined(separator: "\n")
            }
            print("the check's plan over 100,000 threads:\n\(plan)")
            #expect(plan.contains("conversations_waiting"), "\(plan)")
            #expect(!plan.contains("Seq Scan"), "\(plan)")
            #expect(!plan.contains("Hash"), "no table is read whole to be hashed: \(plan)")
            // And what it finds: the buyer's last messages of the last 14 days (even i with i % 400 < 14:
            // 1,750), less those about a sold watch (i % 4 == 0: 750 left) and those reminded of
            // already (i % 40 == 2, which here means i % 400 == 2: 500 left).
            let started = ContinuousClock.now
            let outcome = try await db.check(at: now)
            print("one check over 100,000 threads and 2,000 shops: \(ContinuousClock.now - started), \(outcome.reminders.count) shops reminded")
            #expect(outcome.messages == 500, "\(outcome.messages) reminded, \(outcome.shopsHeldBack) shops held back")
        }
    }

    @Test func theMigrationAddsTheIndexToLiveTablesMadeBeforeIt() async throws {
        try await withTestDatabase { db in
            try await db.project()
            #expect(try await db.scalar("SELECT to_regclass('public.conversations_waiting') IS NOT NULL", Bool.self), "new live tables have it")
            // Live tables of a release before the index: drop it, then run what sql/012 runs.
            let migration = try String(
                contentsOf: TestDatabase.migrationsDirectory.appendingPathComponent("012_shop_reminders.sql"), encoding: .utf8)
            let block = String(migration[migration.range(of: "DO $$")!.lowerBound...])
            try await db.client.withConnection { connection in
                try connection.execute("DROP INDEX conversations_waiting")
                try connection.execute(block)
            }
            #expect(try await db.scalar("SELECT to_regclass('public.conversations_waiting') IS NOT NULL", Bool.self))
            #expect(
                try await db.scalar("SELECT version FROM projection_checkpoints WHERE projection = 'threads'", Int32.self) == 1,
                "no new version, so no replay is forced")
        }
    }

    @Test func theMigrationRunsBeforeAnyLiveTableExists() async throws {
        // TestDatabase.make migrated a database without read models: sql/012 had nothing to index.
        try await withTestDatabase { db in
            let noReadModels = try await db.scalar("SELECT to_regclass('public.conversations') IS NULL", Bool.self)
            let applied = try await db.scalar("SELECT count(*)::int FROM schema_migrations WHERE version = 12", Int.self)
            #expect(noReadModels && applied == 1)
        }
    }
}
