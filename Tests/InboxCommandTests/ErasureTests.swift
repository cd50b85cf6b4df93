import EventLog
import Foundation
import InboxDomain
import InboxTesting
import PostgresClient
import Projections
import Testing
import Uploads

/// Erasing a person from the append-only log, end to end with the `inbox` binary: their personal
/// fields are sealed at rest from the start; `inbox erase` deletes their key, and then no byte of
/// what they wrote is anywhere in the database or its dump, while the thread, its order and the
/// other party's messages stay; a replay after it equals the live read models.
@Suite(.serialized) struct ErasureTests {
    static let planted = ["PLANTED-ALICE-FIRST-7f3a", "PLANTED-ALICE-LAST-91c2", "PLANTED-DEVICE-5e0b", "PLANTED-SEARCH-2d8e", "PLANTED-REASON-c4a1"]
    static let samsReply = "SAMS-REPLY-STAYS-0b1e"

    /// Every row of every table of `public`, as text.
    static func everything(_ db: TestDatabase) async throws -> String {
        try await db.client.withConnection { connection in
            let tables = try connection.query(
                "SELECT table_name::text FROM information_schema.tables WHERE table_schema = 'public' AND table_type = 'BASE TABLE'"
            ).map { try $0.decode(String.self, at: 0) }
            var text = ""
            for table in tables {
                text += try connection.query("SELECT coalesce(string_agg(t::text, '|'), '') FROM public.\"\(table)\" t").scalar(String.self)
            }
            return text
        }
    }

    static func setup(_ db: TestDatabase) async throws {
        let events: [any CatalogueEvent] = [
            ShopMemberAdded(shopId: "s1", personId: "sam"), WatchStatusChanged(watchId: "w1", shopId: "s1", status: .forSale),
            ConversationStarted(conversationId: "c1", buyerId: "alice", shopId: "s1", watchId: "w1"),
            MessageSent(conversationId: "c1", messageId: "m1", authorSide: .buyer, authorId: "alice", body: planted[0]),
            MessageSent(conversationId: "c1", messageId: "m2", authorSide: .seller, authorId: "sam", body: samsReply),
            MessageSent(conversationId: "c1", messageId: "m3", authorSide: .buyer, authorId: "alice", body: planted[1]),
            SignedIn(personId: "alice", signInId: "s-1", platform: "app:ios", device: planted[2]),
            SavedSearchCreated(savedSearchId: "ss1", personId: "alice", name: planted[3], query: .object([:]), interval: .daily, push: true),
            AccountBlocked(personId: "alice", reason: planted[4]),
        ]
        _ = try await db.store.append(try events.map { try NewEvent(catalogueEvent: $0) })
    }

    @Test func anErasedPersonsWordsAreNowhereWhileTheThreadAndTheOtherSideStay() async throws {
        try await withTestDatabase { db in
            try await Self.setup(db)
            // Sealed at rest from the start: the log holds none of it, the read models all of it.
            let log = try await db.client.query("SELECT coalesce(string_agg(payload::text, '|'), '') FROM events") { try $0.decode(String.self, at: 0) }
            for text in Self.planted { #expect(!log[0].contains(text), "\(text) is in the log in the clear") }
            #expect(!log[0].contains(Self.samsReply))
            try await ProjectCommandTests.projectUntilCaughtUp(db)
            let before = try await Self.everything(db)
            // All but the sign-in's device, which only the log holds (the bell keeps no personal text).
            for text in Self.planted + [Self.samsReply] where text != Self.planted[2] { #expect(before.contains(text), "\(text) is not in the read models") }

            let erased = try await InboxCLI.run(["erase", "--person", "alice"], environment: InboxCLI.databaseEnvironment(db.url))
            #expect(erased.status == 0, "\(erased.stderr)")
            #expect(erased.stdout.contains("erased alice: their data key is deleted"), "\(erased.stdout)")
            // Projected inline when the erasure is next in the log; else (other transactions open on
            // the server) by the projectors, as soon as they reach it.
            try await ProjectCommandTests.projectUntilCaughtUp(db)

            // Nowhere in the database, nor in its dump; Sam's reply and the thread stay.
            let after = try await Self.everything(db)
            for text in Self.planted { #expect(!after.contains(text), "\(text) is still in the database") }
            #expect(after.contains(Self.samsReply))
            let dump = try BackupRestoreTests.tool("pg_dump", ["--dbname", db.url])
            #expect(dump.status == 0)
            for text in Self.planted { #expect(!dump.output.contains(text), "\(text) is in pg_dump's output") }
            #expect(dump.output.contains(Self.samsReply))
            let bodies = try await db.client.query("SELECT message_id, body FROM messages ORDER BY seq") {
                "\(try $0.decode(String.self, "message_id"))=\(try $0.decode(String?.self, "body") ?? "erased")"
            }
            #expect(bodies == ["m1=erased", "m2=\(Self.samsReply)", "m3=erased"])
            #expect(try await db.scalar("SELECT message_count FROM conversations WHERE conversation_id = 'c1'", Int32.self) == 3)
            #expect(try await db.scalar("SELECT last_message_body IS NULL FROM conversations WHERE conversation_id = 'c1'", Bool.self))
            #expect(try await db.scalar("SELECT count(*)::int FROM events WHERE type = 'person_erased'", Int.self) == 1)

            // The log reads the erased fields as erased, never as garbage; the other side's as written.
            let records = try await db.events()
            let messages = try records.filter { $0.type == "message_sent" }.map { try $0.decode(MessageSent.self, using: InboxCatalogue.registry) }
            #expect(messages.map(\.body) == [.erased, .text(Self.samsReply), .erased])
            let signIn = try #require(records.first { $0.type == "signed_in" })
            #expect(try signIn.decode(SignedIn.self, using: InboxCatalogue.registry).device == .erased)
            #expect(signIn.openedPayloadJSON.contains(#""device":{"$erased":true}"#), "\(signIn.openedPayloadJSON)")

            // A replay after the erasure makes the same read models.
            let live = try await ProjectCommandTests.liveFingerprint(db)
            let replay = try await InboxCLI.run(["replay"], environment: InboxCLI.databaseEnvironment(db.url), timeout: .seconds(300))
            #expect(replay.status == 0, "\(replay.stderr)")
            let replayed = try await ProjectCommandTests.liveFingerprint(db)
            let models = InboxProjections.all.flatMap(\.tableNames)
            #expect(models.filter { live[$0] != replayed[$0] } == [], "read models that differ after the replay")

            // Again: nothing to delete, and said so.
            let again = try await InboxCLI.run(["erase", "--person", "alice"], environment: InboxCLI.databaseEnvironment(db.url))
            #expect(again.status == 0 && again.stdout.contains("no data key was left"), "\(again.stdout)")
        }
    }

    /// Their uploads go too: `inbox erase` expires them and sweeps at once, so the records, the
    /// bucket's objects and the erasing node's files go; another node's copy goes at its own sweep.
    /// The same bytes uploaded by somebody else are theirs as well, and stay.
    @Test func anErasedPersonsUploadsLeaveTheBucketAndEveryNodesFolder() async throws {
        guard let s3 = ProcessInfo.processInfo.environment["INBOX_TEST_S3_URL"], !s3.isEmpty else {
            Issue.record("INBOX_TEST_S3_URL is not set: run the tests with `make test`, which starts an S3-compatible server (scripts/test-s3.sh).")
            return
        }
        let bucketURL = s3 + "/erase-\(UUID().uuidString.lowercased().prefix(8))"
        let bucket = S3Bucket(settings: .init(url: bucketURL, accessKeyId: "test", secretAccessKey: "test-secret"))
        try bucket.create()
        let folders = (0..<2).map { FileManager.default.temporaryDirectory.appendingPathComponent("erase-uploads-\($0)-\(UUID().uuidString)", isDirectory: true) }
        defer { for folder in folders { try? FileManager.default.removeItem(at: folder) } }
        try await withTestDatabase { db in
            try await InboxProjections.prepareLiveTables(client: db.client)
            let stores = folders.map { UploadStore(client: db.client, directory: $0, bucket: bucket) }
            let own = (0..<4_000).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ 1) }
            let shared = (0..<4_000).map { UInt8(truncatingIfNeeded: $0 &* 13 &+ 5) }
            let photo = try stores[0].store(own, contentType: "video/mp4", person: "alice", origin: "api", appVersion: nil, source: "file")
            let alicesCopy = try stores[0].store(shared, contentType: "video/mp4", person: "alice", origin: "api", appVersion: nil, source: "file")
            let bobs = try stores[0].store(shared, contentType: "video/mp4", person: "bob", origin: "api", appVersion: nil, source: "file")
            try await db.client.withConnection { connection in
                try connection.transaction { connection in
                    _ = try stores[0].markAttached([photo.handle], person: "alice", conversationId: "c1", messageId: "m1", on: connection)
                }
            }
            // The second node served the photo once, and keeps a copy.
            _ = try stores[1].file(of: photo)
            func exists(_ folder: URL, _ sha256: String) -> Bool { FileManager.default.fileExists(atPath: folder.appendingPathComponent(sha256).path) }
            func inBucket(_ sha256: String) throws -> Bool {
                let probe = FileManager.default.temporaryDirectory.appendingPathComponent("probe-\(UUID().uuidString)").path
                let descriptor = open(probe, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
                defer {
                    close(descriptor)
                    unlink(probe)
                }
                return try bucket.get(key: "uploads/" + sha256, to: descriptor, limit: UploadLimits.maximumFileBytes)
            }
            #expect(try exists(folders[1], photo.sha256) && inBucket(photo.sha256))

            let erased = try await InboxCLI.run(
                ["erase", "--person", "alice"],
                environment: InboxCLI.databaseEnvironment(
                    db.url,
                    [
                        "INBOX_UPLOADS_DIR": folders[0].path, "INBOX_UPLOADS_S3_URL": bucketURL, "INBOX_UPLOADS_S3_ACCESS_KEY_ID": "test",
                        "INBOX_UPLOADS_S3_SECRET_ACCESS_KEY": "test-secret",
                    ]))
            #expect(erased.status == 0, "\(erased.stderr)")
            #expect(erased.stdout.contains("2 uploads of theirs expired; 2 upload records deleted"), "\(erased.stdout)")
            #expect(try stores[0].upload(photo.handle) == nil && stores[0].upload(alicesCopy.handle) == nil, "alice's handles are gone")
            #expect(try await db.scalar("SELECT count(*)::int FROM uploads WHERE person_id = 'alice'", Int.self) == 0)
            #expect(try await db.scalar("SELECT count(*)::int FROM upload_attachments", Int.self) == 0)
            #expect(try !exists(folders[0], photo.sha256) && !inBucket(photo.sha256), "the photo left the erasing node and the bucket")
            // Bob's upload of the same bytes is his: it stays, and is served.
            #expect(try stores[0].upload(bobs.handle) != nil)
            #expect(try exists(folders[0], bobs.sha256) && inBucket(bobs.sha256))
            // The other node's copy goes at that node's sweep; what is still named stays.
            #expect(exists(folders[1], photo.sha256))
            _ = try stores[1].file(of: bobs)
            #expect(try stores[1].sweep() == 0)
            #expect(!exists(folders[1], photo.sha256), "the second node's copy of the erased photo")
            #expect(exists(folders[1], bobs.sha256))
        }
    }

    /// A sealed value copied into another event's row does not open: it is bound to its own event
    /// and its stream.
    @Test func aSealedValueCopiedIntoAnotherEventDoesNotOpen() async throws {
        try await withTestDatabase { db in
            try await Self.setup(db)
            /// The `"body": {"$sealed": {...}}` member of a stored payload.
            func sealedBody(_ payload: String) throws -> String {
                let start = try #require(payload.range(of: #""body": {"$sealed""#))
                let end = try #require(payload.range(of: "}}", range: start.upperBound..<payload.endIndex))
                return String(payload[start.lowerBound..<end.upperBound])
            }
            func stored(_ position: Int64) async throws -> String {
                try await db.client.query("SELECT payload::text FROM events WHERE position = $1", binds: [PostgresBind(position)]) {
                    try $0.decode(String.self, at: 0)
                }[0]
            }
            let original = try await db.client.query("SELECT payload::text FROM events WHERE payload->>'messageId' = 'm1'") { try $0.decode(String.self, at: 0) }[0]
            // Another message of Alice's, her own key, the same field: only its `$seal` differs.
            let copy = try await db.store.append(
                try NewEvent(catalogueEvent: MessageSent(conversationId: "c1", messageId: "m4", authorSide: .buyer, authorId: "alice", body: "mine")))
            let copyPayload = try await stored(copy.event.position)
            let alicesBody = try sealedBody(original)
            let forged = copyPayload.replacingOccurrences(of: try sealedBody(copyPayload), with: alicesBody)
            #expect(forged != copyPayload && forged.contains(alicesBody))
            try await db.client.withConnection { connection in
                _ = try connection.query(
                    "INSERT INTO events (stream_id, stream_version, type, payload, metadata) VALUES ('conversation-c1', 99, 'message_sent', $1::jsonb, '{\"origin\":\"api\"}')",
                    forged.replacingOccurrences(of: #""messageId": "m4""#, with: #""messageId": "m9""#)
                        .replacingOccurrences(of: "$seal\": \"", with: "$seal\": \"ffff"))
            }
            let forgedRecord = try #require(try await db.events(where: "payload->>'messageId' = 'm9'").first)
            #expect(throws: (any Error).self, "it must not open") { try forgedRecord.decode(MessageSent.self, using: InboxCatalogue.registry) }
            // The whole payload, its `$seal` included, copied into another conversation's stream.
            try await db.client.withConnection { connection in
                _ = try connection.query(
                    "INSERT INTO events (stream_id, stream_version, type, payload, metadata) VALUES ('conversation-c2', 1, 'message_sent', $1::jsonb, '{\"origin\":\"api\"}')",
                    original.replacingOccurrences(of: #""conversationId": "c1""#, with: #""conversationId": "c2""#))
            }
            let moved = try #require(try await db.events(where: "stream_id = 'conversation-c2'").first)
            #expect(moved.payloadJSON.contains(try sealedBody(original)))
            #expect(throws: (any Error).self, "it must not open in another stream") { try moved.decode(MessageSent.self, using: InboxCatalogue.registry) }
            let genuine = try #require(try await db.events(where: "payload->>'messageId' = 'm1'").first)
            #expect(try genuine.decode(MessageSent.self, using: InboxCatalogue.registry).body == .text(Self.planted[0]))
        }
    }

    /// Rotating the key-encryption key without stopping: every node reads both, `personal-data
    /// rewrap` wraps every data key under the new one, and then the old one is not needed.
    @Test func theKeyEncryptionKeyRotatesWhileTheLogStaysReadable() async throws {
        try await withTestDatabase { db in
            try await Self.setup(db)
            let new = FileManager.default.temporaryDirectory.appendingPathComponent("new-kek-\(UUID().uuidString.prefix(8))")
            defer { try? FileManager.default.removeItem(at: new) }
            try Data(repeating: 9, count: 32).write(to: new)
            var both = InboxCLI.databaseEnvironment(db.url)
            both["INBOX_PERSONAL_DATA_KEY_FILE"] = new.path
            both["INBOX_PERSONAL_DATA_PREVIOUS_KEY_FILE"] = TestPersonalData.keyFile
            let rewrapped = try await InboxCLI.run(["personal-data", "rewrap"], environment: both)
            #expect(rewrapped.status == 0 && rewrapped.stdout.contains("rewrapped 2 data keys"), "\(rewrapped.stdout) \(rewrapped.stderr)")
            var onlyNew = InboxCLI.databaseEnvironment(db.url)
            onlyNew["INBOX_PERSONAL_DATA_KEY_FILE"] = new.path
            #expect(try await InboxCLI.run(["status"], environment: onlyNew).status == 0, "the new key alone opens every data key")
            let again = try await InboxCLI.run(["personal-data", "rewrap"], environment: both)
            #expect(again.stdout.contains("rewrapped 0 data keys"), "every key is under the new one: \(again.stdout)")
            let old = try await InboxCLI.run(["status"], environment: InboxCLI.databaseEnvironment(db.url))
            #expect(old.status != 0 && old.stderr.contains("does not open the data key"), "the old key alone no longer does: \(old.stderr)")
        }
    }

    /// Without the key-encryption key, or with another, no command reads the log: a sentence says so.
    @Test func aMissingOrWrongKeyEncryptionKeyIsRefusedAtStart() async throws {
        try await withTestDatabase { db in
            try await Self.setup(db)
            var missing = InboxCLI.databaseEnvironment(db.url)
            missing["INBOX_PERSONAL_DATA_KEY_FILE"] = nil
            let without = try await InboxCLI.run(["status"], environment: missing)
            #expect(without.status != 0 && without.stderr.contains("set INBOX_PERSONAL_DATA_KEY_FILE"), "\(without.stderr)")
            let other = FileManager.default.temporaryDirectory.appendingPathComponent("other-kek-\(UUID().uuidString.prefix(8))")
            defer { try? FileManager.default.removeItem(at: other) }
            try Data(repeating: 7, count: 32).write(to: other)
            var wrong = InboxCLI.databaseEnvironment(db.url)
            wrong["INBOX_PERSONAL_DATA_KEY_FILE"] = other.path
            let withWrong = try await InboxCLI.run(["status"], environment: wrong)
            #expect(withWrong.status != 0 && withWrong.stderr.contains("does not open the data key"), "\(withWrong.stderr)")
        }
    }
}
