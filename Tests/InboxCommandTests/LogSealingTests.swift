import EventLog
import Foundation
import InboxDomain
import InboxTesting
import PostgresClient
import Projections
import Synchronization
import Testing

/// A log appended in the clear (before sealing was on) copied sealed by `inbox personal-data
/// seal-log`, while appends go on: afterwards no planted text is in the database or its dump, every
/// event is there once with its position, transaction and version, the erased person's fields read
/// erased and the others' as written, and the log is the log (append-only, its functions, a replay
/// equal to the live read models).
@Suite(.serialized) struct LogSealingTests {
    static let planted = ["PLANTED-LEGACY-ALICE-3c1d", "PLANTED-LEGACY-DEVICE-77ab", "PLANTED-LEGACY-SEARCH-0e9f"]
    static let bobsWords = "BOB-LEGACY-WORDS-5a2c"

    /// Appended as a node without a key file appended it: the payload as the catalogue writes it.
    static func appendInTheClear(_ events: [any CatalogueEvent], on connection: PostgresConnection) throws {
        for event in events {
            let new = try NewEvent(catalogueEvent: event)
            _ = try connection.query(
                """
                INSERT INTO events (stream_id, stream_version, type, schema_version, payload, metadata)
                VALUES ($1, coalesce((SELECT max(stream_version) FROM events WHERE stream_id = $1), 0) + 1, $2, $3, $4::jsonb, '{"origin":"api"}')
                """, new.streamId, new.type, Int32(new.schemaVersion), new.payloadJSON)
        }
    }

    static func identities(_ db: TestDatabase) async throws -> [String] {
        try await db.client.query(
            "SELECT position || ' ' || transaction_id || ' ' || stream_id || ' ' || stream_version || ' ' || type || ' ' || recorded_at FROM events ORDER BY position"
        ) { try $0.decode(String.self, at: 0) }
    }

    @Test func aLogAppendedInTheClearIsCopiedSealedWhileAppendsGoOn() async throws {
        try await withTestDatabase { db in
            try await db.client.withConnection { connection in
                try Self.appendInTheClear(
                    [
                        ShopMemberAdded(shopId: "s1", personId: "sam"), WatchStatusChanged(watchId: "w1", shopId: "s1", status: .forSale),
                        ConversationStarted(conversationId: "c1", buyerId: "alice", shopId: "s1", watchId: "w1"),
                        MessageSent(conversationId: "c1", messageId: "m1", authorSide: .buyer, authorId: "alice", body: Self.planted[0]),
                        ConversationStarted(conversationId: "c2", buyerId: "bob", shopId: "s1", watchId: "w1"),
                        MessageSent(conversationId: "c2", messageId: "m2", authorSide: .buyer, authorId: "bob", body: Self.bobsWords),
                        SignedIn(personId: "alice", signInId: "s-1", platform: "app:ios", device: Self.planted[1]),
                        SavedSearchCreated(savedSearchId: "ss1", personId: "alice", name: Self.planted[2], query: .object([:]), interval: .daily, push: true),
                    ], on: connection)
            }
            // And some sealed already, as a node with the key appends them.
            _ = try await db.store.append(
                try [MessageSent(conversationId: "c2", messageId: "m3", authorSide: .seller, authorId: "sam", body: "sealed from the start")].map {
                    try NewEvent(catalogueEvent: $0)
                })
            try await ProjectCommandTests.projectUntilCaughtUp(db)
            let erased = try await InboxCLI.run(["erase", "--person", "alice"], environment: InboxCLI.databaseEnvironment(db.url))
            #expect(erased.status == 0, "\(erased.stderr)")
            #expect(erased.stdout.contains("3 events of theirs were appended before sealing was on"), "\(erased.stdout)")
            let log = try await db.client.query("SELECT string_agg(payload::text, '|') FROM events") { try $0.decode(String.self, at: 0) }[0]
            #expect(log.contains(Self.planted[0]) && log.contains(Self.bobsWords), "in the clear before")
            let before = try await Self.identities(db)

            // The projectors follow the log through the copy and the swap.
            let projector = try InboxCLI.start(["project"], environment: InboxCLI.databaseEnvironment(db.url))
            defer { projector.cleanUp() }
            // Bob goes on writing while the log is copied; every append must succeed and be kept.
            let stop = Atomic<Bool>(false)
            let writer = Task {
                var written: [String] = []
                var index = 0
                while !stop.load(ordering: .relaxed) {
                    index += 1
                    let id = "w\(index)"
                    _ = try await db.store.append(
                        try NewEvent(catalogueEvent: MessageSent(conversationId: "c2", messageId: id, authorSide: .buyer, authorId: "bob", body: "while copying \(index)")))
                    written.append(id)
                }
                return written
            }
            try await Task.sleep(for: .milliseconds(100))
            let sealed = try await InboxCLI.run(["personal-data", "seal-log"], environment: InboxCLI.databaseEnvironment(db.url), timeout: .seconds(120))
            try await Task.sleep(for: .milliseconds(100))
            stop.store(true, ordering: .relaxed)
            let written = try await writer.value
            #expect(sealed.status == 0, "\(sealed.stderr)")
            #expect(sealed.stdout.contains("sealed the log:") && sealed.stdout.contains("4 of them with their personal fields sealed now"), "\(sealed.stdout)")
            #expect(written.count > 2, "the writer appended \(written.count) messages")

            // Every event once, the old ones where they were; the writer's all there.
            let after = try await Self.identities(db)
            #expect(Array(after.prefix(before.count)) == before)
            let messages = try await db.events(where: "type = 'message_sent'").map { try $0.decode(MessageSent.self, using: InboxCatalogue.registry) }
            #expect(messages.filter { $0.messageId.hasPrefix("w") }.map(\.messageId) == written)
            #expect(try await db.scalar("SELECT count(*)::int FROM events", Int.self) == after.count)
            #expect(try await db.scalar("SELECT count(DISTINCT position)::int FROM events", Int.self) == after.count)

            // Sealed: the erased person's fields erased, Bob's words his (and not in the clear).
            #expect(messages.first { $0.messageId == "m1" }?.body == .erased)
            #expect(messages.first { $0.messageId == "m2" }?.body == .text(Self.bobsWords))
            #expect(messages.first { $0.messageId == "m3" }?.body == .text("sealed from the start"))
            let logAfter = try await db.client.query("SELECT string_agg(payload::text, '|') FROM events") { try $0.decode(String.self, at: 0) }[0]
            #expect(!logAfter.contains(Self.bobsWords))
            let everything = try await ErasureTests.everything(db)
            for text in Self.planted { #expect(!everything.contains(text), "\(text) is still in the database") }
            let dump = try BackupRestoreTests.tool("pg_dump", ["--dbname", db.url])
            #expect(dump.status == 0)
            for text in Self.planted { #expect(!dump.output.contains(text), "\(text) is in pg_dump's output") }
            #expect(dump.output.contains(Self.bobsWords), "in bob's thread's read model")

            // Still the log: append-only, its triggers, functions, indexes and sequence in place.
            await #expect(throws: PostgresError.self) { try await db.client.execute("UPDATE events SET type = 'x' WHERE position = 1") }
            await #expect(throws: PostgresError.self) { try await db.client.execute("DELETE FROM events WHERE position = 1") }
            #expect(try await db.scalar("SELECT count(*)::int FROM pg_trigger WHERE tgrelid = 'events'::regclass AND NOT tgisinternal", Int.self) == 3)
            #expect(try await db.scalar("SELECT to_regclass('events_sealing') IS NULL", Bool.self))
            #expect(
                try await db.scalar(
                    "SELECT string_agg(indexrelid::regclass::text, ',' ORDER BY indexrelid::regclass::text) FROM pg_index WHERE indrelid = 'events'::regclass",
                    String.self) == "events_idempotency_key_unique,events_pkey,events_stream_version_unique,events_transaction_position")
            #expect(try await db.scalar("SELECT pg_get_serial_sequence('events', 'position')", String.self) == "public.events_position_seq")
            let next = try await db.store.append(try NewEvent(catalogueEvent: MessageSent(conversationId: "c2", messageId: "m-after", authorSide: .buyer, authorId: "bob", body: "after")))
            #expect(next.event.position > Int64(after.count))

            // The projectors went on from their checkpoints, and a replay makes the same read models.
            do { try await db.waitUntilProjected(timeout: .seconds(60)) } catch { Issue.record("\(error); the projector said: \(projector.stderrSoFar.suffix(3000))"); return }
            try await ProjectCommandTests.stop(projector)
            #expect(try await db.scalar("SELECT count(*)::int FROM messages WHERE message_id LIKE 'w%'", Int.self) == written.count)
            let live = try await ProjectCommandTests.liveFingerprint(db)
            let replay = try await InboxCLI.run(["replay"], environment: InboxCLI.databaseEnvironment(db.url), timeout: .seconds(300))
            #expect(replay.status == 0, "\(replay.stderr)")
            let replayed = try await ProjectCommandTests.liveFingerprint(db)
            #expect(InboxProjections.all.flatMap(\.tableNames).filter { live[$0] != replayed[$0] } == [], "read models that differ after the replay")

            let again = try await InboxCLI.run(["personal-data", "seal-log"], environment: InboxCLI.databaseEnvironment(db.url))
            #expect(again.status == 0 && again.stdout.contains("nothing to do"), "\(again.stdout)")
        }
    }
}
