import EventLog
import Foundation
import InboxDomain
import InboxSimulation
import InboxTesting
import PostgresClient
@testable import Projections
import Synchronization
import Testing

/// A replay folded in slices of people (`SlicedReplay`) against one fold over the whole log.
@Suite struct ReplaySliceTests {
    /// Every type the sliced folds handle goes somewhere: a fold with a type and no route would
    /// stop a sliced replay (`SlicedReplay` refuses it) rather than leave the type out.
    @Test func everyTypeTheSlicedFoldsHandleHasARoute() throws {
        var simulation = MarketplaceSimulation(configuration: .init(people: 300, shops: 20, watches: 200, seed: 7))
        var router = ReplaySliceRouter(count: 7)
        let folds: [(any Projection, any ReplayFold.Type)] = [(BellProjection(), BellReplayFold.self), (ThreadsProjection(), ThreadsReplayFold.self)]
        var routed: [String: Set<String>] = [:]
        var slicesSeen = Set<Int>()
        for (offset, event) in simulation.events(40_000).enumerated() {
            let record = RecordedEvent(
                position: Int64(offset + 1), transactionId: 1, streamId: event.streamId, streamVersion: 1, type: event.type,
                schemaVersion: event.schemaVersion, payloadJSON: event.payloadJSON, metadataJSON: "{}", idempotencyKey: nil, recordedAt: Date())
            let projected = try ProjectedEvent.decode(record)
            #expect(projected.record.position == Int64(offset + 1))
            router.observe(projected)
            for (projection, fold) in folds where projection.eventTypes.contains(event.type) {
                let found = fold.route(projected, router)
                let route = try #require(found, "\(projection.name) has no route for \(event.type)")
                if case .slice(let slice) = route { slicesSeen.insert(slice) }
                routed[projection.name, default: []].insert(event.type)
            }
        }
        // What the simulation never writes, by hand.
        for payload: any CatalogueEvent in [ShopMemberRemoved(shopId: "s1", personId: "p1"), SignedOut(personId: "p1", signInIds: ["s-1"]),
            SignInLinked(personId: "p1", provider: "apple"), SignInUnlinked(personId: "p1", provider: "apple"),
            ConversationReopened(conversationId: "c1", personId: "p1"), RecoveryCodesRenewed(personId: "p1"), PersonErased(personId: "p1"),
            SignInAttemptsFailed(personId: "p1", attempts: 5), RefreshTokenReused(personId: "p1", signInId: "s-1"),
        ] {
            let record = RecordedEvent(
                position: 40_001, transactionId: 1, streamId: payload.streamId, streamVersion: 1, type: type(of: payload).eventType,
                schemaVersion: 1, payloadJSON: "{}", metadataJSON: "{}", idempotencyKey: nil, recordedAt: Date())
            let projected = ProjectedEvent(record: record, payload: payload)
            for (projection, fold) in folds where projection.eventTypes.contains(record.type) {
                #expect(fold.route(projected, router) != nil, "\(projection.name) has no route for \(record.type)")
                routed[projection.name, default: []].insert(record.type)
            }
        }
        for (projection, _) in folds {
            #expect(projection.eventTypes.subtracting(routed[projection.name] ?? []).sorted() == [], "\(projection.name)")
        }
        #expect(slicesSeen == Set(0..<7))
    }

    /// Ids chosen by producers that two slices could both make: a message id in two threads, a
    /// legacy notification id imported for two people. One fold over the log makes only the
    /// first of each; a replay in slices finds them (the messages' primary key, the router) and
    /// rebuilds those projections through SQL, so the rows are still the live ones.
    @Test func idsReusedAcrossSlicesSendTheirProjectionsThroughSQLAndTheRowsAreStillTheLiveOnes() async throws {
        try await withTestDatabase { db in
            let slices = 3
            // Two buyers in different slices, so their threads and bells are folded apart.
            let buyers = (0..<50).map { "buyer-\($0)" }
            let first = try #require(buyers.first)
            let second = try #require(buyers.first { ReplaySliceRouter.slice(of: $0, count: slices) != ReplaySliceRouter.slice(of: first, count: slices) })
            var simulation = MarketplaceSimulation(configuration: .init(people: 200, shops: 10, watches: 100, seed: 5))
            try await db.withProjectors {
                _ = try await db.appendSimulated(&simulation, count: 1_500)
                try await db.append(
                    ConversationStarted(conversationId: "reuse-a", buyerId: first, shopId: "shop-1", watchId: "watch-1"),
                    ConversationStarted(conversationId: "reuse-b", buyerId: second, shopId: "shop-1", watchId: "watch-2"),
                    MessageSent(conversationId: "reuse-a", messageId: "m-twice", authorSide: .seller, authorId: "seller-1", body: "First"),
                    MessageSent(conversationId: "reuse-b", messageId: "m-twice", authorSide: .seller, authorId: "seller-1", body: "Second"),
                    LegacyNotificationImported(
                        personId: first, notificationId: "legacy-twice", category: .messages, event: "offer_received", ids: [:],
                        createdAt: "2024-05-01T10:00:00Z", read: false),
                    LegacyNotificationImported(
                        personId: second, notificationId: "legacy-twice", category: .messages, event: "offer_received", ids: [:],
                        createdAt: "2024-05-01T10:00:00Z", read: false),
                    NotificationRead(personId: second, notificationId: "legacy-twice"))
                _ = try await db.appendSimulated(&simulation, count: 1_500)
                try await db.waitUntilProjected()
            }
            // The live rows keep the first of each.
            #expect(try await db.scalar("SELECT count(*)::int FROM messages WHERE message_id = 'm-twice'", Int.self) == 1)
            #expect(try await db.scalar("SELECT person_id FROM bell_entries WHERE notification_id = 'legacy-twice'", String.self) == first)
            let stages = Mutex<[String]>([])
            let comparison = try await db.compareWithReplay(inMemoryEventLimit: 1_100) { progress in
                if let stage = progress.stage { stages.withLock { $0.append(stage) } }
            }
            for table in comparison {
                #expect(table.differing == 0, "\(table.table): \(table.differing) rows differ between live and replay: \(table.examples)")
            }
            let fallbacks = stages.withLock { $0 }.filter { $0.contains("cannot be folded in slices") }
            #expect(fallbacks.count == 2 && fallbacks.contains { $0.contains("bell") } && fallbacks.contains { $0.contains("threads") }, "\(stages.withLock { $0 })")
        }
    }
}

/// A replay's largest tables go in COPYs of bounded size, each its own transaction outside one, so
/// that none holds back the log's readers for long (gap-safe reads).
@Suite struct ReplayCopyTests {
    @Test func rowsGoInCOPYsOfAtMostTheBoundEachATransactionOfItsOwn() async throws {
        try await withTestDatabase { db in
            try await db.client.execute("CREATE TABLE copied (n int NOT NULL, xid xid8 NOT NULL DEFAULT pg_current_xact_id())")
            try await db.client.withConnection { connection in
                try ReplayCopy.copy(Array(0..<120), into: "COPY copied (n) FROM STDIN", on: connection, rowsPerStatement: 50) { [String($0)] }
            }
            #expect(try await db.scalar("SELECT count(*)::int FROM copied", Int.self) == 120)
            #expect(try await db.scalar("SELECT count(DISTINCT n)::int FROM copied", Int.self) == 120)
            #expect(try await db.scalar("SELECT count(DISTINCT xid)::int FROM copied", Int.self) == 3)
            #expect(try await db.scalar("SELECT max(c)::int FROM (SELECT count(*) AS c FROM copied GROUP BY xid) AS t", Int.self) == 50)
        }
    }
}

/// A projector whose tables are empty catches up as a replay folds (`Projector.Options.inMemoryEvents`).
@Suite struct InMemoryCatchUpTests {
    /// The same log caught up from empty tables batch by batch through SQL and folded in memory
    /// gives the same rows, the same outbox in the same order, and the same checkpoints; the
    /// in-memory one in one transaction (one batch of all the events).
    @Test func aCatchUpFromEmptyTablesInMemoryGivesTheRowsAndTheOutboxOfOneBatchByBatch() async throws {
        try await withTestDatabase { db in
            var simulation = MarketplaceSimulation(configuration: .init(people: 400, shops: 20, watches: 600, seed: 9))
            _ = try await db.appendSimulated(&simulation, count: 6_000, batchSize: 500)
            let tables = InboxProjections.all.flatMap(\.tableNames)
            try await db.withProjectors(inMemoryEvents: 0) { try await db.waitUntilProjected() }
            try await db.client.transaction { connection in
                for table in tables { try connection.execute("CREATE TABLE batch_by_batch_\(table) AS SELECT * FROM public.\(table)") }
                try connection.execute(
                    """
                    CREATE TABLE batch_by_batch_outbox AS
                    SELECT notification_id, audience, recipient_id, category, event, ids, source_position, created_at,
                        row_number() OVER (ORDER BY id) AS ordinal FROM notification_outbox;
                    CREATE TABLE batch_by_batch_checkpoints AS SELECT projection, transaction_id, position, events_applied FROM projection_checkpoints;
                    """)
                for table in tables { try connection.execute("DROP TABLE public.\(table)") }
                try connection.execute("DELETE FROM projection_checkpoints; TRUNCATE notification_outbox CASCADE")
            }
            let applied = Mutex<[Int]>([])
            try await db.withProjectors([BellProjection(), ThreadsProjection()], batchSize: 100, report: { report in
                if case .applied(let events, _, _) = report { applied.withLock { $0.append(events) } }
            }) {
                try await db.waitUntilProjected([BellProjection(), ThreadsProjection()])
                // The in-memory catch-up's reader session lasts as long as the catch-up: the
                // projectors, still running, hold their lease's and their listener's.
                var sessions: [String] = []
                for _ in 0..<250 {
                    sessions = try await db.client.query(
                        "SELECT application_name FROM pg_stat_activity WHERE datname = current_database() AND application_name LIKE 'inbox-project-%'"
                    ) { try $0.decode(String.self, at: 0) }.sorted()
                    if !sessions.contains(where: { $0.hasSuffix("-reader") || $0.contains("-side") }) { break }
                    try await Task.sleep(for: .milliseconds(20))
                }
                #expect(
                    sessions == [
                        "inbox-project-bell [no appends]", "inbox-project-bell-listener", "inbox-project-threads [no appends]",
                        "inbox-project-threads-listener",
                    ],
                    "\(sessions)")
            }
            #expect(applied.withLock { $0 }.contains { $0 > 1_000 }, "some batch was the in-memory one: \(applied.withLock { $0 })")
            try await db.withProjectors([PeopleProjection(), PreferencesProjection()]) {
                try await db.waitUntilProjected([PeopleProjection(), PreferencesProjection()])
            }
            for table in tables {
                let differing = try await db.scalar(
                    """
                    SELECT count(*)::int FROM ((SELECT * FROM public.\(table) EXCEPT ALL SELECT * FROM batch_by_batch_\(table))
                        UNION ALL (SELECT * FROM batch_by_batch_\(table) EXCEPT ALL SELECT * FROM public.\(table))) d
                    """, Int.self)
                #expect(differing == 0, "\(table): \(differing) rows differ")
            }
            let outbox = try await db.scalar("SELECT count(*)::int FROM batch_by_batch_outbox", Int.self)
            #expect(outbox > 100)
            let outboxDiffering = try await db.scalar(
                """
                SELECT count(*)::int FROM (
                    (SELECT * FROM batch_by_batch_outbox EXCEPT ALL
                     SELECT notification_id, audience, recipient_id, category, event, ids, source_position, created_at,
                        row_number() OVER (ORDER BY id) FROM notification_outbox)
                    UNION ALL
                    (SELECT notification_id, audience, recipient_id, category, event, ids, source_position, created_at,
                        row_number() OVER (ORDER BY id) FROM notification_outbox
                     EXCEPT ALL SELECT * FROM batch_by_batch_outbox)) d
                """, Int.self)
            #expect(outboxDiffering == 0, "\(outboxDiffering) outbox rows differ, or are in another order")
            // Copied straight into the empty outbox, every row was queued for the fan-out and the mailer, as an INSERT's are.
            let queued = try await db.scalar(
                """
                SELECT count(*)::int FROM notification_outbox o
                WHERE EXISTS (SELECT 1 FROM notification_outbox_pending p WHERE p.outbox_id = o.id)
                  AND EXISTS (SELECT 1 FROM mail_pending m WHERE m.outbox_id = o.id)
                """, Int.self)
            #expect(queued == outbox)
            let checkpointsDiffering = try await db.scalar(
                """
                SELECT count(*)::int FROM (SELECT projection, transaction_id, position, events_applied FROM projection_checkpoints
                    EXCEPT SELECT * FROM batch_by_batch_checkpoints) d
                """, Int.self)
            #expect(checkpointsDiffering == 0)
        }
    }

    /// A replay killed before it could delete its spill (`SIGKILL`) leaves a folder behind; the next
    /// sliced replay deletes it, and leaves the folders of processes that are alive.
    @Test func theSpillOfAReplayWhoseProcessIsGoneIsRemovedAndALiveOnesIsNot() throws {
        let parent = FileManager.default.temporaryDirectory.appendingPathComponent("spill-sweep-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: parent) }
        let ended = Process()
        ended.executableURL = URL(fileURLWithPath: "/bin/true")
        try ended.run()
        ended.waitUntilExit()
        let dead = "inbox-replay-\(ended.processIdentifier)-\(UUID().uuidString)"
        let mine = "inbox-replay-\(getpid())-\(UUID().uuidString)"
        let unrelated = "inbox-replay-notes"
        for name in [dead, mine, unrelated] {
            try FileManager.default.createDirectory(at: parent.appendingPathComponent(name).appendingPathComponent("x"), withIntermediateDirectories: true)
            #expect(FileManager.default.createFile(atPath: parent.appendingPathComponent(name).appendingPathComponent("slice-1").path, contents: Data([1, 2, 3])))
        }
        #expect(ReplaySpill.removeAbandoned(in: parent) == [dead])
        let left = try FileManager.default.contentsOfDirectory(atPath: parent.path).sorted()
        #expect(left == [mine, unrelated].sorted())
        #expect(ReplaySpill.removeAbandoned(in: parent.appendingPathComponent("no-such-folder")).isEmpty)
    }

    /// Into an outbox that already holds some of the notifications (sent before the bell's tables
    /// were emptied), the in-memory catch-up leaves those rows as they are and enqueues the others
    /// once each, in the log's order; into an empty one it copies them straight in (the test above).
    @Test func aCatchUpInMemoryLeavesTheOutboxRowsAlreadyThereAsTheyAre() async throws {
        try await withTestDatabase { db in
            var simulation = MarketplaceSimulation(configuration: .init(people: 300, shops: 20, watches: 400, seed: 11))
            _ = try await db.appendSimulated(&simulation, count: 3_000, batchSize: 500)
            try await db.withProjectors([BellProjection()], inMemoryEvents: 0) { try await db.waitUntilProjected([BellProjection()]) }
            let key = "notification_id || '/' || audience || '/' || recipient_id"
            let everything = try await db.client.query("SELECT \(key) FROM notification_outbox ORDER BY id") { try $0.decode(String.self, at: 0) }
            try #require(everything.count > 20)
            // The first ten stay (as if sent already); the rest go, with the bell's tables.
            let kept = try await db.client.query("SELECT \(key) || '@' || id || '@' || enqueued_at FROM notification_outbox ORDER BY id LIMIT 10") {
                try $0.decode(String.self, at: 0)
            }
            try await db.client.transaction { connection in
                try connection.execute("DELETE FROM notification_outbox WHERE id NOT IN (SELECT id FROM notification_outbox ORDER BY id LIMIT 10)")
                for table in BellProjection().tableNames { try connection.execute("DROP TABLE public.\(table)") }
                try connection.execute("DELETE FROM projection_checkpoints WHERE projection = 'bell'")
            }
            let applied = Mutex<[Int]>([])
            try await db.withProjectors([BellProjection()], batchSize: 100, report: { report in
                if case .applied(let events, _, _) = report { applied.withLock { $0.append(events) } }
            }) { try await db.waitUntilProjected([BellProjection()]) }
            #expect(applied.withLock { $0 }.contains { $0 > 1_000 }, "the catch-up was the in-memory one: \(applied.withLock { $0 })")
            let keptAfter = try await db.client.query(
                "SELECT \(key) || '@' || id || '@' || enqueued_at FROM notification_outbox ORDER BY id LIMIT 10"
            ) { try $0.decode(String.self, at: 0) }
            #expect(keptAfter == kept, "the rows already there were left as they were")
            let after = try await db.client.query("SELECT \(key) FROM notification_outbox ORDER BY id") { try $0.decode(String.self, at: 0) }
            #expect(after == everything, "each notification once, the others enqueued again in the log's order")
        }
    }

    /// The in-memory catch-up writes the bell's outbox on a session of its own, committed before
    /// the transaction with the rows and the checkpoint. When that transaction fails after it (here
    /// a serialization failure the first time the checkpoint moves), the retry finds the outbox
    /// rows there and leaves them: each notification is enqueued once, in the log's order, as
    /// batch by batch.
    @Test func aCatchUpWhoseTransactionFailsAfterItsOutboxCommittedEnqueuesEachNotificationOnce() async throws {
        try await withTestDatabase { db in
            var simulation = MarketplaceSimulation(configuration: .init(people: 300, shops: 20, watches: 400, seed: 12))
            _ = try await db.appendSimulated(&simulation, count: 3_000, batchSize: 500)
            try await db.withProjectors([BellProjection()], inMemoryEvents: 0) { try await db.waitUntilProjected([BellProjection()]) }
            let key = "notification_id || '/' || audience || '/' || recipient_id"
            let everything = try await db.client.query("SELECT \(key) FROM notification_outbox ORDER BY id") { try $0.decode(String.self, at: 0) }
            try #require(everything.count > 20)
            try await db.client.transaction { connection in
                try connection.execute("TRUNCATE notification_outbox CASCADE")
                for table in BellProjection().tableNames { try connection.execute("DROP TABLE public.\(table)") }
                try connection.execute("DELETE FROM projection_checkpoints WHERE projection = 'bell'")
                // A sequence is not rolled back with the transaction that draws from it: the
                // first move of the bell's checkpoint past the start fails, the next succeeds.
                try connection.execute(
                    """
                    CREATE SEQUENCE bell_catch_up_tries;
                    CREATE FUNCTION fail_the_first_catch_up() RETURNS trigger LANGUAGE plpgsql AS $$
                    BEGIN
                        IF NEW.projection = 'bell' AND NEW.events_applied > 0 AND nextval('bell_catch_up_tries') = 1 THEN
                            RAISE EXCEPTION 'the first catch-up fails after its outbox committed' USING ERRCODE = '40001';
                        END IF;
                        RETURN NEW;
                    END $$;
                    CREATE TRIGGER fail_the_first_catch_up BEFORE UPDATE ON projection_checkpoints
                        FOR EACH ROW EXECUTE FUNCTION fail_the_first_catch_up();
                    """)
            }
            let reports = Mutex<[Projector.Report]>([])
            try await db.withProjectors([BellProjection()], batchSize: 100, report: { report in reports.withLock { $0.append(report) } }) {
                try await db.waitUntilProjected([BellProjection()])
            }
            let seen = reports.withLock { $0 }
            #expect(seen.contains { if case .retrying = $0 { true } else { false } }, "the first catch-up failed: \(seen)")
            #expect(
                seen.contains { if case .applied(let events, _, _) = $0 { events > 1_000 } else { false } },
                "the second was the in-memory one: \(seen)")
            let tries = try await db.scalar("SELECT last_value::int FROM bell_catch_up_tries", Int.self)
            #expect(tries >= 2)
            let after = try await db.client.query("SELECT \(key) FROM notification_outbox ORDER BY id") { try $0.decode(String.self, at: 0) }
            #expect(after == everything, "each notification once, in the log's order")
            let queued = try await db.scalar(
                "SELECT count(*)::int FROM notification_outbox_pending p JOIN notification_outbox o ON o.id = p.outbox_id", Int.self)
            #expect(queued == everything.count, "each queued for the fan-out")
        }
    }
}
