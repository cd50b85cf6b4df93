import EventLog
import Foundation
import InboxDomain
import InboxTesting
import PostgresClient
import Projections
import Testing

/// sql/019 on a database of the release before it: the bell's live tables of version 2 get the
/// audience's facts folded from the log up to the bell's checkpoint (exactly what the projection
/// folds), and what the older release left waiting in the outbox is decided once.
@Suite struct AudienceFactsMigrationTests {
    static let factTables = [
        "SELECT shop_id || ' ' || person_id FROM bell_shop_members",
        "SELECT person_id || ' ' || category || ' ' || channel || ' ' || enabled FROM bell_switches",
        "SELECT person_id FROM bell_blocked_accounts",
        "SELECT saved_search_id || ' ' || person_id || ' ' || deleted || ' ' || interval || ' ' || push FROM bell_saved_searches",
    ]

    static func facts(_ db: TestDatabase) async throws -> [[String]] {
        var facts: [[String]] = []
        for query in factTables { facts.append(try await db.client.query(query + " ORDER BY 1") { try $0.decode(String.self, at: 0) }.sorted()) }
        return facts
    }

    @Test func theMigrationFoldsTheFactsTheProjectionWouldAndDecidesWhatWaits() async throws {
        try await withTestDatabase { db in
            let search = { (id: String, interval: SavedSearchInterval, push: Bool) in
                SavedSearchCreated(savedSearchId: id, personId: "p1", name: id, query: .object([:]), interval: interval, push: push)
            }
            try await db.withProjectors {
                try await db.append(
                    ShopMemberAdded(shopId: "s1", personId: "p1"), ShopMemberAdded(shopId: "s1", personId: "p2"),
                    ShopMemberAdded(shopId: "s1", personId: "p3"), ShopMemberRemoved(shopId: "s1", personId: "p3"),
                    ShopMemberRemoved(shopId: "s2", personId: "p1"), ShopMemberAdded(shopId: "s2", personId: "p1"),
                    NotificationPreferenceChanged(personId: "p2", category: .shop, channel: .email, enabled: false),
                    NotificationPreferenceChanged(personId: "p2", category: .messages, channel: .push, enabled: false),
                    NotificationPreferenceChanged(personId: "p2", category: .messages, channel: .push, enabled: true),
                    NotificationPreferenceChanged(personId: "p4", category: .savedWatches, channel: .push, enabled: false),
                    AccountBlocked(personId: "p5"), AccountBlocked(personId: "p5"),
                    search("q1", .daily, true), search("q2", .never, false),
                    SavedSearchChanged(savedSearchId: "q1", personId: "p1", interval: .weekly),
                    SavedSearchChanged(savedSearchId: "q2", personId: "p1", push: true), SavedSearchDeleted(savedSearchId: "q2", personId: "p1"))
                try await db.waitUntilProjected()
            }
            let projected = try await Self.facts(db)
            #expect(projected[0] == ["s1 p1", "s1 p2", "s2 p1"])
            // After the bell's checkpoint: the migration leaves these to the projector.
            try await db.append(ShopMemberAdded(shopId: "s1", personId: "late"), AccountBlocked(personId: "p1"))

            // The database as the release before left it: the bell at version 2 without these facts,
            // the outbox without decisions, and rows of that release still waiting in both queues.
            try await db.client.withConnection { connection in
                _ = try connection.execute(
                    """
                    DROP TABLE bell_shop_members, bell_switches, bell_blocked_accounts;
                    ALTER TABLE bell_saved_searches DROP COLUMN interval, DROP COLUMN push;
                    UPDATE projection_checkpoints SET version = 2 WHERE projection = 'bell';
                    ALTER TABLE notification_outbox DROP COLUMN recipients, DROP COLUMN push_skipped, DROP COLUMN mail_skipped;
                    DELETE FROM schema_migrations WHERE version = 19;
                    INSERT INTO notification_outbox (notification_id, audience, recipient_id, category, event, ids, source_position, created_at)
                    VALUES ('n1', 'person', 'p2', 'messages', 'message_received', '{"conversationId": "c1"}', 100, now()),
                        ('n2', 'person', 'p4', 'saved_watches', 'price_dropped', '{"watchId": "w1"}', 101, now()),
                        ('n3', 'shop', 's1', 'shop', 'order_paid', '{"orderId": "o1", "sellerId": "s1"}', 102, now()),
                        ('n4', 'shop', 's9', 'shop', 'offer_made', '{"conversationId": "c9", "sellerId": "s9"}', 103, now()),
                        ('n5', 'shop', 's1', 'shop', 'shop_unanswered', '{"sellerId": "s1"}', 0, now());
                    -- The mailer of that release had taken the order's news already.
                    DELETE FROM mail_pending WHERE outbox_id = (SELECT id FROM notification_outbox WHERE notification_id = 'n3');
                    """)
            }
            try await Migrator(directory: TestDatabase.migrationsDirectory).migrate(client: db.client)

            #expect(try await Self.facts(db) == projected, "the facts as the projection folded them, up to its checkpoint")
            #expect(try await db.scalar("SELECT version FROM projection_checkpoints WHERE projection = 'bell'", Int32.self) == 3)
            func listed(_ column: String) -> String {
                "array_to_string(ARRAY(SELECT coalesce(nullif(x, ''), 'yes') FROM unnest(\(column)) x), ',')"
            }
            let waiting = try await db.client.query(
                """
                SELECT notification_id || ' ' || recipient_id || ' to:' || array_to_string(recipients, ',') || ' push:' || \(listed("push_skipped"))
                        || ' mail:' || \(listed("mail_skipped"))
                        || ' queues:' || (EXISTS (SELECT 1 FROM notification_outbox_pending p WHERE p.outbox_id = o.id))::text
                        || '/' || (EXISTS (SELECT 1 FROM mail_pending m WHERE m.outbox_id = o.id))::text
                FROM notification_outbox o
                WHERE EXISTS (SELECT 1 FROM notification_outbox_pending p WHERE p.outbox_id = o.id)
                    OR EXISTS (SELECT 1 FROM mail_pending m WHERE m.outbox_id = o.id)
                ORDER BY 1
                """
            ) { try $0.decode(String.self, at: 0) }
            #expect(
                waiting == [
                    "n1 p2 to:p2 push:yes mail:yes queues:true/true",
                    "n2 p4 to:p4 push:preference_off mail:yes queues:true/true",
                    "n3 s1 to:p1,p2 push:yes,yes mail:yes,preference_off queues:true/false",
                    "n4 s9 to: push:no_member mail:no_member queues:true/true",
                    "n5 s1 to:p1,p2 push:yes,yes mail:yes,yes queues:true/true",
                ], "\(waiting)")

            // The projector takes it on from there.
            try await db.withProjectors { try await db.waitUntilProjected() }
            #expect(try await Self.facts(db)[0] == ["s1 late", "s1 p1", "s1 p2", "s2 p1"])
            #expect(try await Self.facts(db)[2] == ["p1", "p5"])
        }
    }
}
