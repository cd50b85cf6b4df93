import EventLog
import Foundation
import InboxDomain
import InboxTesting
import Lifecycle
import PostgresClient
import Testing

@Suite struct SubscriptionTests {
    /// With a clock that does not move, only the NOTIFY of the append can wake the subscriber.
    @Test func aSubscriberWakesOnTheNotifyOfAnAppend() async throws {
        let db = try await TestDatabase.make()
        defer { Task { await db.drop() } }
        let clock = TestClock()
        let stream = db.store.subscribe(after: .start, options: .init(pollInterval: .seconds(60)), clock: clock)
        let received = streamIds(2, from: stream)
        _ = try await db.store.append(message("conversation-1", "before the wait"))
        // Read, and waiting (besides a few ms held back by another test's transaction, maybe).
        try await clock.waitForSleepers(1)
        _ = try await db.store.append(message("conversation-2", "wakes the subscriber"))
        let held = Task {
            // Held-back retries wait on the clock too: it creeps on 10 ms at a time, so it reaches
            // the poll interval (60 s) only if the notification never wakes the subscriber.
            while !Task.isCancelled {
                if clock.sleepers > 0 { clock.advance(by: .milliseconds(10)) }
                try await Task.sleep(for: .milliseconds(5))
            }
        }
        defer { held.cancel() }
        let bodies = try await received.value
        #expect(bodies == ["conversation-1", "conversation-2"])
        #expect(clock.now.offset < .seconds(60), "woken by the notification, not by the poll interval")
    }

    /// An insert that sends no NOTIFY is still found by the poll, when the clock says it is time.
    @Test func aSubscriberThatMissesTheNotificationFindsTheEventAtThePollIntervalOfItsClock() async throws {
        let db = try await TestDatabase.make()
        defer { Task { await db.drop() } }
        let clock = TestClock()
        let stream = db.store.subscribe(after: .start, options: .init(pollInterval: .seconds(30)), clock: clock)
        let received = Task { () -> Int64? in
            for try await batch in stream { return batch.first?.streamVersion }
            return nil
        }
        try await clock.waitForSleepers(1)
        try await db.client.execute(
            """
            INSERT INTO events (stream_id, stream_version, type, payload, metadata)
            VALUES ('conversation-quiet', 1, 'message_sent', '{"body":"no notify"}', '{"origin":"api"}')
            """)
        // Moved on for as long as the subscriber waits on it: besides the poll interval, it also
        // waits out events held back by an older transaction of another test on the cluster.
        let mover = Task {
            while !Task.isCancelled {
                if clock.sleepers > 0 { clock.advance(by: .seconds(30)) }
                try await Task.sleep(for: .milliseconds(5))
            }
        }
        defer { mover.cancel() }
        #expect(try await received.value == 1)
    }

    /// Its sessions killed under it, the subscriber opens new ones and misses nothing.
    @Test func aSubscriberWhoseSessionsAreKilledGoesOnWithoutARestart() async throws {
        let db = try await TestDatabase.make()
        defer { Task { await db.drop() } }
        let stream = db.store.subscribe(after: .start, options: .init(pollInterval: .seconds(60), reconnectDelay: .milliseconds(10)))
        let received = streamIds(2, from: stream)
        _ = try await db.store.append(message("conversation-1", "before"))
        let killer = try db.connect()
        defer { killer.close() }
        var open = 0
        for _ in 0..<500 where open < 2 {
            try await Task.sleep(for: .milliseconds(10))
            open = try killer.query(
                """
                SELECT count(*)::int FROM pg_stat_activity
                WHERE datname = current_database() AND application_name LIKE 'inbox-subscription%'
                """
            ).scalar(Int.self)
        }
        try killer.query(
            """
            SELECT pg_terminate_backend(pid) FROM pg_stat_activity
            WHERE datname = current_database() AND application_name LIKE 'inbox-subscription%'
            """)
        _ = try await db.store.append(message("conversation-2", "after the loss"))
        #expect(try await received.value == ["conversation-1", "conversation-2"])
    }
}
