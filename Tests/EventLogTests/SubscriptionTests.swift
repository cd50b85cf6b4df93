import EventLog
import Foundation
import InboxDomain
import InboxTesting
import PostgresClient
import Testing

@Suite struct SubscriptionTests {
    /// With a poll interval of a minute, only the NOTIFY of the append can wake the subscriber in time.
    @Test func aSubscriberWakesOnTheNotifyOfAnAppend() async throws {
        let db = try await TestDatabase.make()
        defer { Task { await db.drop() } }
        let stream = db.store.subscribe(after: .start, options: .init(pollInterval: .seconds(60)))
        let received = Task { () -> [String] in
            var bodies: [String] = []
            for try await batch in stream {
                bodies += batch.map(\.streamId)
                if bodies.count >= 2 { break }
            }
            return bodies
        }
        _ = try await db.store.append(message("conversation-1", "before the wait"))
        try await Task.sleep(for: .milliseconds(500))
        let started = ContinuousClock.now
        _ = try await db.store.append(message("conversation-2", "wakes the subscriber"))
        let bodies = try await received.value
        #expect(bodies == ["conversation-1", "conversation-2"])
        #expect(ContinuousClock.now - started < .seconds(20))
    }

    /// An insert that sends no NOTIFY is still found by the poll.
    @Test func aSubscriberThatMissesTheNotificationFindsTheEventByPolling() async throws {
        let db = try await TestDatabase.make()
        defer { Task { await db.drop() } }
        let stream = db.store.subscribe(after: .start, options: .init(pollInterval: .milliseconds(100)))
        let received = Task { () -> Int64? in
            for try await batch in stream { return batch.first?.streamVersion }
            return nil
        }
        try await Task.sleep(for: .milliseconds(300))
        try await db.client.execute(
            """
            INSERT INTO events (stream_id, stream_version, type, payload, metadata)
            VALUES ('conversation-quiet', 1, 'message_sent', '{"body":"no notify"}', '{"origin":"api"}')
            """)
        #expect(try await received.value == 1)
    }
}
