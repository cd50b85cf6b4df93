import EventLog
import Foundation
import InboxDomain
import InboxSimulation
import InboxTesting
import PostgresClient
import Projections
import Synchronization
import Testing

/// The read models against the log they come from: counters against a recount, live tables
/// against a replay, after randomized streams.
@Suite struct ReadModelConsistencyTests {
    @Test func everyCounterEqualsARecountAfterARandomizedStream() async throws {
        try await withTestDatabase { db in
            var simulation = MarketplaceSimulation(configuration: .init(people: 150, shops: 12, watches: 300, seed: 7))
            try await db.withProjectors(batchSize: 97) {
                try await db.appendSimulated(&simulation, count: 4000, batchSize: 50, inlineEvery: 3)
                try await db.waitUntilProjected()
            }
            let problems = try await db.countersThatDisagreeWithARecount()
            #expect(problems.isEmpty, "\(problems.prefix(10))")
            // The stream exercised what the counters count.
            let unreadEntries = try await db.scalar("SELECT count(*)::int FROM bell_entries WHERE read_at IS NULL", Int.self)
            let readEntries = try await db.scalar("SELECT count(*)::int FROM bell_entries WHERE read_at IS NOT NULL", Int.self)
            let unreadThreads = try await db.scalar("SELECT count(*)::int FROM thread_sides WHERE unread", Int.self)
            let readThreads = try await db.scalar("SELECT count(*)::int FROM thread_sides WHERE NOT unread", Int.self)
            #expect(unreadEntries > 50 && readEntries > 50, "unread \(unreadEntries), read \(readEntries)")
            #expect(unreadThreads > 20 && readThreads > 20, "unread \(unreadThreads), read \(readThreads)")
            let parked = try await db.client.query(
                "SELECT projection || ' ' || type || ': ' || min(error) || ' (' || count(*) || ')' AS e FROM projection_dead_letters GROUP BY projection, type"
            ) { try $0.decode(String.self, "e") }
            #expect(parked.isEmpty, "\(parked)")
        }
    }

    /// On a cluster of its own, so that the inline driver (which steps aside while an older
    /// transaction of the cluster writes) takes its share of the batches.
    @Test func aReplayReproducesTheLiveReadModelsRowForRowAndSendsNothing() async throws {
        let cluster = try await TestCluster.make()
        defer { cluster.tearDown() }
        let db = try await cluster.database()
        defer { db.client.close() }
        do {
            var simulation = MarketplaceSimulation(configuration: .init(people: 2000, shops: 80, watches: 3000, seed: 11))
            let inlineApplied = try await db.withProjectors {
                let applied = try await db.appendSimulated(&simulation, count: 12_000, batchSize: 200, inlineEvery: 4)
                try await db.waitUntilProjected()
                return applied
            }
            #expect(inlineApplied > 20, "inline batches applied: \(inlineApplied) of 60 batches × 4 projections")
            let parked = try await db.client.query("SELECT type || ': ' || error AS e FROM projection_dead_letters LIMIT 5") {
                try $0.decode(String.self, "e")
            }
            #expect(parked.isEmpty, "\(parked)")
            let outboxBefore = try await db.scalar("SELECT count(*)::int FROM notification_outbox", Int.self)
            let people = try await db.scalar("SELECT count(DISTINCT person_id)::int FROM bell_entries", Int.self)
            #expect(people > 500, "the stream reaches many people's bells: \(people)")

            let comparison = try await db.compareWithReplay()
            // Every projection through SQL, batch by batch.
            let throughSQL = try await db.compareWithReplay(inMemoryEventLimit: 0)
            for table in throughSQL {
                #expect(table.differing == 0, "through SQL, \(table.table): \(table.differing) rows differ between live and replay: \(table.examples)")
            }
            // And the log (12,000 events) folded in 8 slices of people, 7 of them spilled to disk and folded after.
            let stages = Mutex<[String]>([])
            let inSlices = try await db.compareWithReplay(inMemoryEventLimit: 1_500) { progress in
                if let stage = progress.stage { stages.withLock { $0.append(stage) } }
            }
            for table in inSlices {
                #expect(table.differing == 0, "in slices, \(table.table): \(table.differing) rows differ between live and replay: \(table.examples)")
            }
            #expect(stages.withLock { $0 }.filter { $0.hasPrefix("replay: slice ") }.count == 7, "\(stages.withLock { $0 })")
            for table in comparison {
                #expect(table.differing == 0, "\(table.table): \(table.differing) rows differ between live and replay: \(table.examples)")
                #expect(table.rows > 0, "\(table.table) is empty")
            }
            let outboxAfter = try await db.scalar("SELECT count(*)::int FROM notification_outbox", Int.self)
            #expect(outboxBefore > 0)
            #expect(outboxAfter == outboxBefore, "a replay enqueued \(outboxAfter - outboxBefore) notifications")
        }
    }

    @Test func aSwapReplacesTheLiveTablesAndTheProjectorResumesFromTheReplaysCheckpoint() async throws {
        try await withTestDatabase { db in
            var simulation = MarketplaceSimulation(configuration: .init(people: 100, shops: 8, watches: 100, seed: 3))
            try await db.withProjectors {
                try await db.appendSimulated(&simulation, count: 1500)
                try await db.waitUntilProjected()
                // Damage the live bell so that the swap is visible: a replay brings the entry back.
                let victim = try await db.scalar("SELECT notification_id FROM bell_entries ORDER BY notification_id LIMIT 1", String.self)
                try await db.client.execute("DELETE FROM bell_entries WHERE notification_id = $1", binds: [PostgresBind(victim)])

                let replayer = Replayer(client: db.client, projections: InboxProjections.all)
                try await replayer.prepare()
                try await replayer.catchUp()
                // The log moves on between the catch-up and the swap; the swap applies the rest.
                try await db.appendSimulated(&simulation, count: 300)
                try await replayer.swap()

                let restored = try await db.scalar("SELECT count(*)::int FROM bell_entries WHERE notification_id = '\(victim)'", Int.self)
                #expect(restored == 1)
                let leftovers = try await db.scalar(
                    "SELECT count(*)::int FROM pg_namespace WHERE nspname LIKE 'replay\\_%' OR nspname LIKE 'retired\\_%'", Int.self)
                #expect(leftovers == 0)
                // The live projectors carry on from the swapped checkpoint.
                try await db.appendSimulated(&simulation, count: 300)
                try await db.waitUntilProjected()
            }
            let problems = try await db.countersThatDisagreeWithARecount()
            #expect(problems.isEmpty, "\(problems.prefix(10))")
            let comparison = try await db.compareWithReplay()
            #expect(comparison.allSatisfy { $0.differing == 0 }, "\(comparison.filter { $0.differing != 0 })")
        }
    }
}
