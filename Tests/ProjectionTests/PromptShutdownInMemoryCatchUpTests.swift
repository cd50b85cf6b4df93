import EventLog
import Foundation
import InboxSimulation
import InboxTesting
import PostgresClient
import Projections
import Testing

/// A projector catching up from empty tables in memory, told to stop (SIGTERM), stops after the
/// batch it is folding and writes what it folded, rather than folding and writing the whole log
/// first (5.6 s for `inbox run` over a large log, past what a role is meant to take). Timed: `make
/// test` runs the `PromptShutdown` suites on their own.
@Suite(.serialized) struct PromptShutdownInMemoryCatchUpTests {
    @Test func aProjectorCatchingUpInMemoryStopsWithinASecondAndKeepsWhatItFolded() async throws {
        try await withTestDatabase { db in
            var simulation = MarketplaceSimulation(configuration: .init(people: 2_000, shops: 40, watches: 3_000, seed: 11))
            _ = try await db.appendSimulated(&simulation, count: 60_000, batchSize: 2_000)
            let bell = BellProjection()
            let types = bell.eventTypes.sorted().map { "'\($0)'" }.joined(separator: ",")
            let taken = try await db.scalar("SELECT count(*)::int FROM events WHERE type IN (\(types))", Int.self)
            let projector = Task {
                try await Projector(
                    projection: bell, configuration: db.configuration, options: .init(pollInterval: .seconds(60), inMemoryBatch: 2_000)
                ).run()
            }
            // Under way: its reader reads the batches ahead while it folds.
            var catchingUp = false
            for _ in 0..<1_000 where !catchingUp {
                catchingUp = try await db.scalar(
                    "SELECT count(*)::int FROM pg_stat_activity WHERE application_name = 'inbox-project-bell-reader'", Int.self) > 0
                if !catchingUp { try await Task.sleep(for: .milliseconds(5)) }
            }
            #expect(catchingUp, "the bell caught up in memory")
            try await Task.sleep(for: .milliseconds(100))
            let stopping = ContinuousClock.now
            projector.cancel()
            _ = await projector.result
            let took = ContinuousClock.now - stopping
            #expect(took < .seconds(1), "stopped \(took) after it was told")
            // What it folded is written with its checkpoint, and is not the whole log.
            let applied = try await db.scalar("SELECT events_applied::int FROM projection_checkpoints WHERE projection = 'bell'", Int.self)
            #expect(applied > 0 && applied < taken, "\(applied) of \(taken) events applied")
            // The next holder goes on from there, to the same end.
            try await db.withProjectors([bell]) { try await db.waitUntilProjected([bell]) }
            #expect(try await db.scalar("SELECT events_applied::int FROM projection_checkpoints WHERE projection = 'bell'", Int.self) == taken)
        }
    }
}
