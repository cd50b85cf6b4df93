import EventLog
import Foundation
import InboxDomain
import InboxTesting
import PostgresClient
import Testing

@Suite struct AppendTests {
    @Test func appendingABatchNumbersEachStreamAndRecordsTheTransaction() async throws {
        let db = try await TestDatabase.make()
        defer { Task { await db.drop() } }
        let appended = try await db.store.append([
            message("conversation-1", "Is it still for sale?"), message("conversation-2", "Hello"),
            message("conversation-1", "Can you ship to Belgium?"),
        ])
        #expect(appended.map(\.wasAppended) == [true, true, true])
        #expect(appended.map(\.event.streamVersion) == [1, 1, 2])
        #expect(Set(appended.map(\.event.transactionId)).count == 1)
        let positions = appended.map(\.event.position)
        #expect(positions == positions.sorted() && Set(positions).count == 3)
        let stored = try await db.readAll()
        #expect(stored.map(\.position) == positions)
        let metadata = try stored[0].metadata()
        #expect(metadata.origin == .appIOS)
        #expect(metadata.appVersion == "2.4.0")
        #expect(stored[0].transactionId == appended[0].event.transactionId)
    }

    @Test func typedEventsRoundTripThroughTheLog() async throws {
        let db = try await TestDatabase.make()
        defer { Task { await db.drop() } }
        let sent = MessageSent(conversationId: "c-9", authorId: "p-4", body: "Ciao — è disponibile?")
        _ = try await db.store.append(try NewEvent(streamId: "conversation-9", payload: sent, metadata: EventMetadata(origin: .web)))
        var registry = EventTypeRegistry()
        registry.register(MessageSent.self)
        let stored = try await db.readAll()
        #expect(try stored.first?.decode(MessageSent.self, using: registry) == sent)
        #expect(try (stored.first?.decode(using: registry) as? MessageSent) == sent)
    }

    @Test func aKnownIdempotencyKeyReturnsTheOriginalAndWritesNothing() async throws {
        let db = try await TestDatabase.make()
        defer { Task { await db.drop() } }
        let first = try await db.store.append(message("conversation-1", "first", key: "request-1"))
        let again = try await db.store.append(message("conversation-1", "first", key: "request-1"))
        #expect(first.wasAppended)
        #expect(!again.wasAppended)
        #expect(again.event.position == first.event.position)
        #expect(again.event.payloadJSON.contains("first"))
        #expect(try await db.count() == 1)
    }

    /// A key sent again with another event is a client's bug, not a retry: refused, naming the
    /// event, and nothing of the batch is written. The same event (payload compared as JSON, so key
    /// order and whitespace do not matter) is a retry and still answers the original.
    @Test func anIdempotencyKeyReusedForAnotherEventIsATypedErrorAndWritesNothing() async throws {
        let db = try await TestDatabase.make()
        defer { Task { await db.drop() } }
        let first = try await db.store.append(message("conversation-1", "first", key: "request-1"))
        await #expect(throws: EventLogError.idempotencyKeyReused(index: 0, key: "request-1")) {
            try await db.store.append(message("conversation-1", "other text", key: "request-1"))
        }
        await #expect(throws: EventLogError.idempotencyKeyReused(index: 0, key: "request-1")) {
            try await db.store.append(message("conversation-2", "first", key: "request-1"))
        }
        var otherType = message("conversation-1", "first", key: "request-1")
        otherType.type = "message_edited"
        await #expect(throws: EventLogError.idempotencyKeyReused(index: 0, key: "request-1")) { try await db.store.append(otherType) }
        // In a batch: the reused key is named by its place, and the new event beside it is not written.
        await #expect(throws: EventLogError.idempotencyKeyReused(index: 1, key: "request-1")) {
            try await db.store.append([message("conversation-3", "new", key: "k-new"), message("conversation-1", "other", key: "request-1")])
        }
        // One key twice in one batch with two different events.
        await #expect(throws: EventLogError.idempotencyKeyReused(index: 1, key: "k-twice")) {
            try await db.store.append([message("conversation-4", "a", key: "k-twice"), message("conversation-4", "b", key: "k-twice")])
        }
        #expect(try await db.count() == 1)
        // The same event with its payload's keys in another order and other whitespace is a retry.
        var reordered = message("conversation-1", "first", key: "request-1")
        reordered.payloadJSON = #"{ "body" : "first", "authorId": "p-1",  "conversationId":"conversation-1" }"#
        let retry = try await db.store.append(reordered)
        #expect(!retry.wasAppended)
        #expect(retry.event.position == first.event.position)
        #expect(try await db.count() == 1)
    }

    @Test func aBatchMixingNewAndKnownKeysWritesOnlyTheNewOnes() async throws {
        let db = try await TestDatabase.make()
        defer { Task { await db.drop() } }
        _ = try await db.store.append([message("conversation-1", "a", key: "k-a"), message("conversation-1", "b", key: "k-b")])
        let mixed = try await db.store.append([
            message("conversation-1", "a", key: "k-a"), message("conversation-1", "c", key: "k-c"),
            message("conversation-1", "c", key: "k-c"), message("conversation-1", "d"),
        ])
        #expect(mixed.map(\.wasAppended) == [false, true, false, true])
        #expect(mixed[2].event.position == mixed[1].event.position)
        #expect(mixed.map(\.event.streamVersion) == [1, 3, 3, 4])
        #expect(try await db.count() == 4)
        let versions = try await db.readAll().map(\.streamVersion)
        #expect(versions == [1, 2, 3, 4])
    }

    /// The common path assumes every key is new; a known one makes it fall back, also inside a
    /// caller's transaction, without writing anything twice or leaving a gap in stream versions.
    @Test func aKnownKeyInABatchOfDistinctKeysFallsBackAndKeepsVersionsDense() async throws {
        let db = try await TestDatabase.make()
        defer { Task { await db.drop() } }
        _ = try await db.store.append(message("conversation-1", "a", key: "k-a"))
        let appended = try await db.client.transaction { connection in
            try EventStore.append(
                [message("conversation-1", "b", key: "k-b"), message("conversation-1", "a", key: "k-a"),
                 message("conversation-2", "c", key: "k-c")], on: connection)
        }
        #expect(appended.map(\.wasAppended) == [true, false, true])
        #expect(appended.map(\.event.streamVersion) == [2, 1, 1])
        #expect(try await db.count() == 3)
        let versions = try await db.readAll().filter { $0.streamId == "conversation-1" }.map(\.streamVersion)
        #expect(versions == [1, 2])
    }

    @Test func aWrongExpectedVersionIsATypedErrorAndWritesNothing() async throws {
        let db = try await TestDatabase.make()
        defer { Task { await db.drop() } }
        _ = try await db.store.append([message("conversation-1", "a"), message("conversation-1", "b")])
        await #expect(throws: EventLogError.wrongExpectedVersion(stream: "conversation-1", expected: 1, actual: 2)) {
            try await db.store.append(message("conversation-1", "c"), expectedVersion: .exactly(1))
        }
        // The whole batch fails, including events on other streams.
        await #expect(throws: EventLogError.wrongExpectedVersion(stream: "conversation-1", expected: 0, actual: 2)) {
            try await db.store.append(
                [message("conversation-2", "x"), message("conversation-1", "y")], expectedVersions: ["conversation-1": .noStream])
        }
        #expect(try await db.count() == 2)
        let ok = try await db.store.append(message("conversation-1", "c"), expectedVersion: .exactly(2))
        #expect(ok.event.streamVersion == 3)
        let fresh = try await db.store.append(message("conversation-3", "new"), expectedVersion: .noStream)
        #expect(fresh.event.streamVersion == 1)
    }

    @Test func aRetryWhoseEventsAreAllKnownSucceedsDespiteAnOldExpectedVersion() async throws {
        let db = try await TestDatabase.make()
        defer { Task { await db.drop() } }
        let first = try await db.store.append(message("conversation-1", "a", key: "once"), expectedVersion: .noStream)
        let retry = try await db.store.append(message("conversation-1", "a", key: "once"), expectedVersion: .noStream)
        #expect(retry.event.position == first.event.position)
        #expect(!retry.wasAppended)
    }

    @Test func concurrentAppendsToOneStreamGetDistinctConsecutiveVersions() async throws {
        let db = try await TestDatabase.make(poolSize: 8)
        defer { Task { await db.drop() } }
        try await withThrowingTaskGroup(of: Void.self) { group in
            for writer in 0..<8 {
                group.addTask {
                    for index in 0..<25 { _ = try await db.store.append(message("conversation-hot", "w\(writer)-\(index)")) }
                }
            }
            try await group.waitForAll()
        }
        let versions = try await db.readAll().map(\.streamVersion).sorted()
        #expect(versions == Array(1...200))
    }

    /// Batches that cross the same streams in opposite orders wait on each other's new versions
    /// and can deadlock in PostgreSQL; the one it aborts is appended again, not lost.
    @Test func batchesCrossingTheSameStreamsInOppositeOrdersAreAllAppended() async throws {
        let db = try await TestDatabase.make(poolSize: 8)
        defer { Task { await db.drop() } }
        let streams = (0..<6).map { "conversation-\($0)" }
        try await withThrowingTaskGroup(of: Void.self) { group in
            for writer in 0..<4 {
                group.addTask {
                    let order = writer % 2 == 0 ? streams : streams.reversed()
                    for round in 0..<10 {
                        _ = try await db.store.append(order.map { message($0, "w\(writer)-r\(round)") } + order.map { message($0, "w\(writer)-r\(round)-again") })
                    }
                }
            }
            try await group.waitForAll()
        }
        let events = try await db.readAll()
        #expect(events.count == 4 * 10 * 12)
        for stream in streams {
            #expect(events.filter { $0.streamId == stream }.map(\.streamVersion).sorted() == Array(1...(4 * 10 * 2)), "\(stream)")
        }
    }

    @Test func invalidEventsAreRefusedNamingTheFieldBeforeAnythingIsWritten() async throws {
        let db = try await TestDatabase.make()
        defer { Task { await db.drop() } }
        var badType = message("conversation-1", "x")
        badType.type = "Message Sent"
        var badPayload = message("conversation-1", "x")
        badPayload.payloadJSON = "[1,2]"
        var emptyStream = message("conversation-1", "x")
        emptyStream.streamId = ""
        await #expect(throws: EventLogError.invalidEvent(index: 1, field: "type", reason: "must be snake_case (a-z, 0-9, _), starting with a letter, at most 100 bytes")) {
            try await db.store.append([message("conversation-1", "fine"), badType])
        }
        await #expect(throws: EventLogError.self) { try await db.store.append([badPayload]) }
        await #expect(throws: EventLogError.self) { try await db.store.append([emptyStream]) }
        #expect(try await db.count() == 0)
    }

    @Test func aStringHoldingNULIsRefusedNamingItsFieldBeforeAnythingIsWritten() async throws {
        let db = try await TestDatabase.make()
        defer { Task { await db.drop() } }
        let reason = "holds the character U+0000, which cannot be stored"
        await #expect(throws: EventLogError.invalidEvent(index: 1, field: "payload.body", reason: reason)) {
            try await db.store.append([message("conversation-1", "fine"), message("conversation-1", "nul\\u0000")])
        }
        var actor = message("conversation-1", "x")
        actor.metadata.actor = "p-1\u{0}"
        await #expect(throws: EventLogError.invalidEvent(index: 0, field: "metadata.actor", reason: reason)) { try await db.store.append([actor]) }
        await #expect(throws: EventLogError.invalidEvent(index: 0, field: "idempotencyKey", reason: reason)) {
            try await db.store.append([message("conversation-1", "x", key: "k\u{0}")])
        }
        // An escaped backslash before u0000 is not a NUL.
        #expect(try await db.store.append([message("conversation-1", #"a \\u0000 b"#)]).count == 1)
        #expect(try await db.count() == 1)
    }

    @Test func theDatabaseRefusesUpdateDeleteAndTruncate() async throws {
        let db = try await TestDatabase.make()
        defer { Task { await db.drop() } }
        _ = try await db.store.append(message("conversation-1", "history"))
        for statement in ["UPDATE events SET type = 'rewritten'", "DELETE FROM events", "TRUNCATE events"] {
            let error = await #expect(throws: PostgresError.self) { try await db.client.execute(statement) }
            #expect(error?.sqlState == .eventsAreImmutable, "\(statement)")
            #expect(error?.message.contains("append-only") == true)
        }
        #expect(try await db.count() == 1)
    }

    @Test func appendingInsideACallersTransactionRollsBackWithIt() async throws {
        let db = try await TestDatabase.make()
        defer { Task { await db.drop() } }
        struct Abort: Error {}
        await #expect(throws: Abort.self) {
            try await db.client.transaction { connection in
                _ = try EventStore.append([message("conversation-1", "inline")], on: connection)
                throw Abort()
            }
        }
        #expect(try await db.count() == 0)
        // A conflict inside the caller's transaction leaves the transaction usable.
        let version = try await db.client.transaction { connection -> Int64 in
            _ = try EventStore.append([message("conversation-1", "a")], on: connection)
            #expect(throws: EventLogError.self) {
                try EventStore.append([message("conversation-1", "b")], expectedVersions: ["conversation-1": .noStream], on: connection)
            }
            return try EventStore.append([message("conversation-1", "c")], on: connection)[0].event.streamVersion
        }
        #expect(version == 2)
    }
}
