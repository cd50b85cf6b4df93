import EventLog
import Foundation
import InboxDomain
import InboxTesting
import PostgresClient
import Synchronization
import Testing

/// A sequence hands out positions before commit, so a lower position can commit after a higher
/// one. A reader that resumes after the highest position it saw would skip the late one; these
/// tests show the log's reader never does.
///
/// Each test has a cluster of its own: transaction ids (and so what a reader may read) are shared
/// by every database of a cluster, and these tests hold transactions open on purpose.
@Suite struct GapSafetyTests {
    @Test func anEventThatCommitsLateIsReadExactlyOnce() async throws {
        try await withTestDatabaseOnAClusterOfItsOwn { db in
            let slow = try db.connect()
            defer { slow.close() }

            // The slow writer takes the lower position and keeps its transaction open.
            try slow.execute("BEGIN")
            let late = try EventStore.append([message("conversation-slow", "late")], on: slow)[0].event
            // A second writer takes a higher position and commits first.
            let early = try await db.store.append(message("conversation-fast", "early")).event
            #expect(late.position < early.position)

            var seen = try await db.store.read(after: .start)
            // Nothing from behind the open transaction is handed out yet.
            #expect(seen.isEmpty)
            var checkpoint = seen.last?.checkpoint ?? .start

            try slow.execute("COMMIT")
            let more = try await db.store.read(after: checkpoint)
            seen += more
            checkpoint = more.last?.checkpoint ?? checkpoint
            #expect(seen.map(\.position) == [late.position, early.position])
            #expect(try await db.store.read(after: checkpoint).isEmpty)
        }
    }

    @Test func readsBeforeAnOpenTransactionStillProgressAndNothingIsSkippedAfterIt() async throws {
        try await withTestDatabaseOnAClusterOfItsOwn { db in
            let committed = try await db.store.append(message("conversation-0", "before"))
            let slow = try db.connect()
            defer { slow.close() }
            try slow.execute("BEGIN")
            _ = try EventStore.append([message("conversation-slow", "late")], on: slow)
            for index in 0..<5 { _ = try await db.store.append(message("conversation-\(index)", "after")) }

            let firstRead = try await db.store.read(after: .start)
            #expect(firstRead.map(\.position) == [committed.event.position])
            try slow.execute("COMMIT")
            let secondRead = try await db.store.read(after: firstRead.last?.checkpoint ?? .start)
            #expect(secondRead.count == 6)
            #expect(Set((firstRead + secondRead).map(\.position)).count == 7)
        }
    }

    /// A subscriber that finds committed events held back by an older open transaction does not wait
    /// a whole poll interval (a minute here) once that transaction ends, even though no notification
    /// is coming (the one for the held-back event went out before it subscribed).
    @Test func aSubscriberPicksUpHeldBackEventsSoonAfterTheOlderTransactionEnds() async throws {
        try await withTestDatabaseOnAClusterOfItsOwn { db in
            let slow = try db.connect()
            defer { slow.close() }
            try slow.execute("BEGIN")
            _ = try EventStore.append([message("conversation-slow", "late")], on: slow)

            _ = try await db.store.append(message("conversation-fast", "early"))

            let stream = db.store.subscribe(after: .start, options: .init(pollInterval: .seconds(60)))
            let received = streamIds(2, from: stream)
            try await Task.sleep(for: .milliseconds(500))
            let committed = ContinuousClock.now
            try slow.execute("COMMIT")
            let streams = try await received.value
            #expect(streams == ["conversation-slow", "conversation-fast"])
            #expect(ContinuousClock.now - committed < .seconds(15))
        }
    }

    /// Several writers append batches of random size, some holding their transaction open for a
    /// while, while a reader follows checkpoints. At the end the reader has seen every event exactly once.
    @Test func concurrentWritersAndAFollowingReaderNeverLoseOrRepeatAnEvent() async throws {
        try await withTestDatabaseOnAClusterOfItsOwn(poolSize: 10) { db in
            let writers = 6
            let batchesPerWriter = 40
            let done = FinishedWriters()

            let reader = Task { () -> [Int64] in
                var seen: [Int64] = []
                var checkpoint = Checkpoint.start
                while true {
                    let finished = done.count.load(ordering: .acquiring) == writers
                    let batch = try await db.store.read(after: checkpoint, limit: 37)
                    seen += batch.map(\.position)
                    if let last = batch.last { checkpoint = last.checkpoint }
                    if batch.isEmpty {
                        if finished { return seen }
                        try await Task.sleep(for: .milliseconds(2))
                    }
                }
            }

            try await withThrowingTaskGroup(of: Void.self) { group in
                for writer in 0..<writers {
                    group.addTask {
                        for batch in 0..<batchesPerWriter {
                            let size = Int.random(in: 1...20)
                            let events = (0..<size).map { message("conversation-\(writer)-\($0 % 3)", "w\(writer) b\(batch) e\($0)") }
                            let holdOpen = Int.random(in: 0..<4) == 0 ? Double.random(in: 0.001...0.02) : nil
                            try await db.client.transaction { connection in
                                _ = try EventStore.append(events, on: connection)
                                // Some transactions stay open after taking their positions.
                                if let holdOpen { try connection.query("SELECT pg_sleep($1)", holdOpen) }
                            }
                        }
                        done.count.add(1, ordering: .releasing)
                    }
                }
                try await group.waitForAll()
            }
            let seen = try await reader.value
            let stored = try await db.client.query("SELECT position FROM events ORDER BY position") { try $0.decode(Int64.self, "position") }
            #expect(seen.count == stored.count, "read \(seen.count) events of \(stored.count)")
            #expect(Set(seen).count == seen.count, "an event was read twice")
            #expect(Set(seen) == Set(stored), "an event was never read")
            #expect(stored.count > writers * batchesPerWriter)
        }
    }
}

final class FinishedWriters: Sendable {
    let count = Atomic<Int>(0)
}
