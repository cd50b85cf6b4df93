import EventLog
import Foundation
import InboxDomain
import InboxTesting
import Lifecycle
import PostgresClient
@testable import Projections
import Synchronization
import Testing

/// The async projector, the inline driver and the dead letters.
@Suite struct ProjectorTests {
    static let started = ConversationStarted(conversationId: "c1", buyerId: "buyer", shopId: "shop", watchId: "w1")

    @Test func anEventThatFailsToApplyIsParkedWithItsErrorAndTheProjectorGoesOn() async throws {
        try await withTestDatabase { db in
            try await db.withProjectors {
                try await db.append(PasswordChanged(personId: "p1"))
                // Valid for the catalogue, but about a conversation nobody started.
                try await db.append(ConversationRead(conversationId: "nowhere", side: .buyer, personId: "p1", upToMessageId: "m0"))
                try await db.append(Self.started, MessageSent(conversationId: "c1", messageId: "m1", authorSide: .seller, authorId: "s", body: "Yes"))
                try await db.waitUntilProjected()
            }
            let letters = try await db.client.query("SELECT projection, type, error FROM projection_dead_letters") { row in
                (try row.decode(String.self, "projection"), try row.decode(String.self, "type"), try row.decode(String.self, "error"))
            }
            #expect(letters.count == 1)
            #expect(letters.first?.0 == "threads")
            #expect(letters.first?.1 == "conversation_read")
            #expect(letters.first?.2.contains("conversation nowhere was never started") == true, "\(letters)")
            // What came after it was applied.
            #expect(try await db.scalar("SELECT count(*)::int FROM messages WHERE message_id = 'm1'", Int.self) == 1)
            #expect(try await db.scalar("SELECT unread_count FROM bell_counters WHERE person_id = 'buyer'", Int32.self) == 1)
        }
    }

    @Test func anEventOfATypeFromANewerReleaseIsParkedByEveryProjectionAndCounted() async throws {
        try await withTestDatabase { db in
            // Written by a newer release: this one's validator would refuse it, the log does not.
            let newer = NewEvent(streamId: "watch-9", type: "watch_auctioned", payloadJSON: #"{"watchId":"9"}"#, metadata: EventMetadata())
            try await db.withProjectors {
                _ = try await db.store.append(newer)
                try await db.append(PasswordChanged(personId: "p1"))
                try await db.waitUntilProjected()
            }
            let parked = try await db.client.query("SELECT projection FROM projection_dead_letters WHERE type = 'watch_auctioned' ORDER BY 1") {
                try $0.decode(String.self, "projection")
            }
            #expect(parked == InboxProjections.all.map(\.name).sorted())
            #expect(try await db.scalar("SELECT count(*)::int FROM bell_entries WHERE person_id = 'p1'", Int.self) == 1)
        }
    }

    /// On a cluster of its own: the inline driver applies only when no older transaction of the
    /// cluster is writing (transaction ids are cluster-wide), which other tests' writes would break.
    @Test func anInlineAppendIsReadableAtOnceAndMovesTheCheckpointSoTheProjectorDoesNotApplyItAgain() async throws {
        let cluster = try await TestCluster.make()
        defer { cluster.tearDown() }
        let db = try await cluster.database()
        // The projectors create the live tables and apply what came before; then they stop.
        try await db.append(Self.started)
        try await db.withProjectors { try await db.waitUntilProjected() }
        try await db.append(MessageSent(conversationId: "c1", messageId: "m0", authorSide: .buyer, authorId: "buyer", body: "Hello"))

        let events = try [
            NewEvent(MessageSent(conversationId: "c1", messageId: "m1", authorSide: .buyer, authorId: "buyer", body: "Still for sale?")),
            NewEvent(MessageSent(conversationId: "c1", messageId: "m2", authorSide: .seller, authorId: "seller", body: "Yes")),
        ]
        let outcome = try await db.client.withConnection { connection in
            try InlineProjections().appendReporting(events, on: connection).outcome
        }
        #expect(outcome.applied == ["bell", "threads"], "deferred: \(outcome.deferred)")
        // Read-your-writes, with the event appended before it (m0) brought in first.
        #expect(try await db.scalar("SELECT count(*)::int FROM messages", Int.self) == 3)
        let unread = try await db.client.withConnection { connection in
            try ThreadReader.unreadConversations(owner: "buyer", side: .buyer, on: connection)
        }
        #expect(unread == 1)
        #expect(try await db.scalar("SELECT unread_count FROM bell_counters WHERE person_id = 'buyer'", Int32.self) == 1)

        try await db.withProjectors { try await db.waitUntilProjected() }
        #expect(try await db.scalar("SELECT count(*)::int FROM messages", Int.self) == 3)
        #expect(try await db.scalar("SELECT count(*)::int FROM bell_entries", Int.self) == 1)
        #expect(try await db.scalar("SELECT count(*)::int FROM notification_outbox", Int.self) == 3, "two of the shop's news, one of the buyer's")
        #expect(try await db.countersThatDisagreeWithARecount().isEmpty)
        let comparison = try await db.compareWithReplay()
        #expect(comparison.allSatisfy { $0.differing == 0 }, "\(comparison.filter { $0.differing != 0 })")
        db.client.close()
    }

    /// The common inline case, nothing committed before it left to apply: every projection's reads
    /// go with the checkpoints' locks and every projection's writes with the COMMIT
    /// (`StagedProjection`), so a group is three round trips whatever it holds, with the rows the
    /// projector and a replay make.
    @Test func anInlineAppendWithNothingPendingIsThreeRoundTripsForEveryProjection() async throws {
        try await Self.withTheThreadProjected { db in
            @Sendable func post(_ id: String, _ side: AuthorSide) throws -> NewEvent {
                try NewEvent(MessageSent(conversationId: "c1", messageId: id, authorSide: side, authorId: side == .buyer ? "buyer" : "seller", body: id))
            }
            let (first, second, trips) = try await db.client.withConnection { connection in
                // The first prepares this connection's statements (a first preparation is a round trip
                // of its own) and makes the authors' data keys, which the second reads once (a key an
                // append made is not kept in memory: its transaction could still roll back); the
                // third, of the same shape, is what every later write costs.
                let first = try InlineProjections().appendReporting([try post("m1", .seller), try post("m2", .buyer)], on: connection).outcome
                _ = try InlineProjections().appendReporting([try post("m3", .seller), try post("m4", .buyer)], on: connection)
                let before = connection.roundTrips
                let second = try InlineProjections().appendReporting([try post("m5", .seller), try post("m6", .buyer)], on: connection).outcome
                return (first, second, connection.roundTrips - before)
            }
            #expect(first.applied == ["bell", "threads"] && second.applied == ["bell", "threads"], "deferred: \(first.deferred) \(second.deferred)")
            // BEGIN with the append; the checkpoints' locks, what is pending and both projections'
            // reads; both projections' writes and the checkpoints' moves with the COMMIT.
            #expect(trips == 3)
            #expect(try await db.scalar("SELECT count(*)::int FROM messages", Int.self) == 6)
            #expect(try await db.scalar("SELECT unread_count FROM bell_counters WHERE person_id = 'buyer'", Int32.self) == 3)
            #expect(try await db.scalar("SELECT count(*)::int FROM notification_outbox", Int.self) == 6, "three of the shop's news, three of the buyer's")
            #expect(try await db.countersThatDisagreeWithARecount().isEmpty)
            let comparison = try await db.compareWithReplay()
            #expect(comparison.allSatisfy { $0.differing == 0 }, "\(comparison.filter { $0.differing != 0 })")
        }
    }

    /// At most `catchUpLimit` events committed before an inline append are applied with it; one
    /// more and every projection is left to the projector (the backlog read as one row saying
    /// so), which then applies them all, once.
    @Test func anInlineAppendAppliesABacklogUpToItsLimitAndLeavesALongerOneToTheProjector() async throws {
        try await Self.withTheThreadProjected { db in
            @Sendable func post(_ id: String) throws -> NewEvent {
                try NewEvent(MessageSent(conversationId: "c1", messageId: id, authorSide: .seller, authorId: "seller", body: id))
            }
            let inline = InlineProjections(catchUpLimit: 3)
            // Three behind: applied first, then the append's own.
            for id in ["b1", "b2", "b3"] { _ = try await db.store.append(try post(id)) }
            let caughtUp = try await db.client.withConnection { try inline.appendReporting([try post("m1")], on: $0).outcome }
            #expect(caughtUp.applied == ["bell", "threads"] && caughtUp.deferred.isEmpty, "\(caughtUp)")
            #expect(try await db.scalar("SELECT count(*)::int FROM messages", Int.self) == 4)
            // Four behind: left to the projector, nothing applied.
            for id in ["b4", "b5", "b6", "b7"] { _ = try await db.store.append(try post(id)) }
            let behind = try await db.client.withConnection { try inline.appendReporting([try post("m2")], on: $0).outcome }
            #expect(behind.applied.isEmpty && behind.deferred == ["bell", "threads"], "\(behind)")
            #expect(try await db.scalar("SELECT count(*)::int FROM messages", Int.self) == 4)
            try await db.withProjectors { try await db.waitUntilProjected() }
            #expect(try await db.scalar("SELECT count(*)::int FROM messages", Int.self) == 9)
            #expect(try await db.scalar("SELECT unread_count FROM bell_counters WHERE person_id = 'buyer'", Int32.self) == 9)
            #expect(try await db.countersThatDisagreeWithARecount().isEmpty)
            let comparison = try await db.compareWithReplay()
            #expect(comparison.allSatisfy { $0.differing == 0 }, "\(comparison.filter { $0.differing != 0 })")
        }
    }

    /// When the staged writes fail (an event a projection refuses), nothing of them stays and the
    /// projections apply one by one as before: the refused event parked, the others applied inline.
    @Test func anInlineAppendWhoseStagedWritesFailParksTheRefusedEventAndAppliesTheRest() async throws {
        try await Self.withTheThreadProjected { db in
            let events = try [
                NewEvent(ConversationRead(conversationId: "nowhere", side: .buyer, personId: "buyer", upToMessageId: "m0")),
                NewEvent(MessageSent(conversationId: "c1", messageId: "m1", authorSide: .seller, authorId: "seller", body: "Yes")),
            ]
            let outcome = try await db.client.withConnection { connection in try InlineProjections().appendReporting(events, on: connection).outcome }
            #expect(outcome.applied == ["bell", "threads"], "deferred: \(outcome.deferred)")
            let letters = try await db.client.query("SELECT projection, type FROM projection_dead_letters") {
                "\(try $0.decode(String.self, "projection")) \(try $0.decode(String.self, "type"))"
            }
            #expect(letters == ["threads conversation_read"])
            #expect(try await db.scalar("SELECT count(*)::int FROM messages WHERE message_id = 'm1'", Int.self) == 1)
            #expect(try await db.scalar("SELECT unread_count FROM bell_counters WHERE person_id = 'buyer'", Int32.self) == 1)
            #expect(try await db.countersThatDisagreeWithARecount().isEmpty)
            // The projector finds nothing more to apply.
            try await db.withProjectors { try await db.waitUntilProjected() }
            #expect(try await db.scalar("SELECT count(*)::int FROM projection_dead_letters", Int.self) == 1)
            #expect(try await db.scalar("SELECT count(*)::int FROM messages", Int.self) == 1)
        }
    }

    /// A staged write that the database refuses (here a trigger refuses one message's row) fails
    /// the group's COMMIT it went with: the group is then done again the careful way, so the
    /// writer still gets its events, appended once, with what the careful way does with a
    /// refused write: the bell applied, the threads rolled back to their savepoint and left to the
    /// projector, which applies them once the database takes the row.
    @Test func aStagedWriteRefusedAtTheCommitIsDoneAgainTheCarefulWayAndLosesNothing() async throws {
        try await Self.withTheThreadProjected { db in
            try await db.client.execute(
                """
                CREATE FUNCTION refuse_poison() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN
                    IF NEW.body = 'poison' THEN RAISE EXCEPTION 'a refused message'; END IF;
                    RETURN NEW;
                END $$
                """)
            try await db.client.execute("CREATE TRIGGER refuse_poison BEFORE INSERT ON messages FOR EACH ROW EXECUTE FUNCTION refuse_poison()")
            let events = try [
                NewEvent(MessageSent(conversationId: "c1", messageId: "m1", authorSide: .seller, authorId: "seller", body: "poison")),
                NewEvent(MessageSent(conversationId: "c1", messageId: "m2", authorSide: .seller, authorId: "seller", body: "Yes")),
            ]
            let (result, trips) = try await db.client.withConnection { connection in
                let before = connection.roundTrips
                let result = try InlineProjections().appendReporting(events, on: connection)
                return (result, connection.roundTrips - before)
            }
            #expect(result.appended.map(\.wasAppended) == [true, true])
            #expect(result.outcome.applied == ["bell"] && result.outcome.deferred == ["threads"])
            #expect(trips > 3, "the group was done again")
            #expect(try await db.scalar("SELECT count(*)::int FROM events WHERE type = 'message_sent'", Int.self) == 2)
            #expect(try await db.scalar("SELECT count(*)::int FROM messages", Int.self) == 0)
            // The bell has both, once each.
            #expect(try await db.scalar("SELECT unread_count FROM bell_counters WHERE person_id = 'buyer'", Int32.self) == 2)
            #expect(try await db.scalar("SELECT count(*)::int FROM notification_outbox", Int.self) == 2)
            try await db.client.execute("DROP TRIGGER refuse_poison ON messages")
            try await db.withProjectors { try await db.waitUntilProjected() }
            #expect(try await db.scalar("SELECT string_agg(message_id, ',' ORDER BY message_id) FROM messages", String.self) == "m1,m2")
            #expect(try await db.scalar("SELECT count(*)::int FROM projection_dead_letters", Int.self) == 0)
            #expect(try await db.countersThatDisagreeWithARecount().isEmpty)
        }
    }

    /// The async projectors beside inline writers take no transaction for what the writers
    /// applied: the threads' and the bell's learn that their checkpoint moved from a read, and the
    /// people's and the preferences' (no message is theirs) read past the messages and write
    /// their checkpoints only when they find nothing new (or after 250 events). A transaction of
    /// theirs would hold a transaction id, and while it lasted no inline writer would be next in
    /// the log: in the HTTP benchmark with the projectors running, one group of message posts in
    /// fourteen left its projections to the projectors. Counted in transaction ids, in a cluster of
    /// its own; before, each projector took one for every post.
    @Test func projectorsBesideInlineWritersTakeNoTransactionForWhatTheWritersApplied() async throws {
        try await Self.withTheThreadProjected { db in
            let posts = 20
            let nextId = "SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint"
            // The ids `posts` inline posts take (a post's savepoints that write take ids of their
            // own), `pause` apart.
            // `deferred`: how many posts left a projection to the projectors.
            @Sendable func idsOfPosts(_ round: String, pause: Duration) async throws -> (ids: Int64, deferred: Int) {
                let before = try await db.scalar(nextId, Int64.self)
                var deferred = 0
                for index in 0..<posts {
                    let event = try NewEvent(
                        MessageSent(conversationId: "c1", messageId: "\(round)\(index)", authorSide: .buyer, authorId: "buyer", body: "Hello"))
                    let outcome = try await db.client.withConnection { connection in try InlineProjections().appendReporting([event], on: connection).outcome }
                    if !outcome.deferred.isEmpty { deferred += 1 }
                    try await Task.sleep(for: pause)
                }
                return (try await db.scalar(nextId, Int64.self) - before, deferred)
            }
            @Sendable func idsBeside(_ projections: [any Projection], _ round: String, pause: Duration) async throws -> (ids: Int64, deferred: Int) {
                try await db.withProjectors(projections) {
                    try await db.waitUntilProjected(projections)
                    try await Task.sleep(for: .milliseconds(300))
                    let before = try await db.scalar(nextId, Int64.self)
                    let posted = try await idsOfPosts(round, pause: pause)
                    try await db.waitUntilProjected(projections)
                    return (try await db.scalar(nextId, Int64.self) - before, posted.deferred)
                }
            }
            let alone = try await idsOfPosts("a", pause: .milliseconds(40))
            #expect(alone.deferred == 0)
            // Time for each projector to wake and look after every post: none of theirs, and no
            // transaction of theirs in the posts' way.
            let threadsAndBell = try await idsBeside([ThreadsProjection(), BellProjection()], "b", pause: .milliseconds(40))
            #expect(threadsAndBell.ids - alone.ids <= 1, "\(alone.ids) transaction ids for \(posts) posts alone, \(threadsAndBell.ids) beside the threads' and the bell's")
            #expect(threadsAndBell.deferred == 0)
            // The same pauses: the people's and the preferences' write their checkpoints once the
            // log has been quiet for a poll interval (200 ms here), at the end; on a machine so busy
            // that a pause between two posts lasts that long, once more each.
            let others = try await idsBeside([PeopleProjection(), PreferencesProjection()], "c", pause: .milliseconds(40))
            #expect(others.ids - alone.ids <= 6, "\(alone.ids) transaction ids for \(posts) posts alone, \(others.ids) beside the people's and the preferences'")
            #expect(try await db.scalar("SELECT count(*)::int FROM messages", Int.self) == 3 * posts)
        }
    }

    /// `body` with the database of a cluster of its own (the inline driver applies only when no
    /// older transaction of the cluster is writing) in which the projectors have applied `started`.
    static func withTheThreadProjected(_ body: (TestDatabase) async throws -> Void) async throws {
        let cluster = try await TestCluster.make()
        defer { cluster.tearDown() }
        let db = try await cluster.database()
        defer { db.client.close() }
        try await db.append(Self.started)
        try await db.withProjectors { try await db.waitUntilProjected() }
        try await body(db)
    }

    @Test func anInlineAppendBehindAnOlderWritingTransactionIsLeftToTheProjector() async throws {
        let cluster = try await TestCluster.make()
        defer { cluster.tearDown() }
        let db = try await cluster.database()
        try await db.append(Self.started)
        try await db.withProjectors { try await db.waitUntilProjected() }
        // An older transaction has appended and not committed.
        let older = try db.connect()
        defer { older.close() }
        try older.execute("BEGIN")
        _ = try EventStore.append([try NewEvent(PasswordChanged(personId: "p1"))], on: older)

        let message = try NewEvent(MessageSent(conversationId: "c1", messageId: "m1", authorSide: .seller, authorId: "s", body: "Yes"))
        let outcome = try await db.client.withConnection { connection in
            try InlineProjections().appendReporting([message], on: connection).outcome
        }
        #expect(outcome.applied.isEmpty)
        #expect(outcome.deferred == ["bell", "threads"])
        #expect(try await db.scalar("SELECT count(*)::int FROM messages", Int.self) == 0)

        try older.execute("COMMIT")
        try await db.withProjectors { try await db.waitUntilProjected() }
        #expect(try await db.scalar("SELECT count(*)::int FROM messages", Int.self) == 1)
        #expect(try await db.scalar("SELECT count(*)::int FROM bell_entries", Int.self) == 2)
        db.client.close()
    }

    /// An older open transaction of a session that never appends (a projector's batch, a fan-out's
    /// claim) does not keep an inline writer from being next (sql/017). What committed after that
    /// transaction began and before the writer's is applied first: read up to the writer's own id,
    /// not the snapshot's xmin, which the open transaction holds back (bounded by the xmin, the
    /// checkpoint would move past `m0` and the read models would never have it). The session
    /// cannot append: the database refuses it.
    @Test func anOlderTransactionOfASessionThatNeverAppendsDoesNotHoldAnInlineWriterBackAndNothingBetweenIsMissed() async throws {
        try await Self.withTheThreadProjected { db in
            let reader = try PostgresConnection(
                configuration: db.configuration, applicationName: SessionsThatNeverAppend.applicationName("inbox-test-claims"))
            defer { reader.close() }
            try reader.execute("BEGIN")
            let readerXid = try reader.query("SELECT pg_current_xact_id()::text::bigint").scalar(Int64.self)
            // And writes behind savepoints, as a projector applies its batch: subtransactions' ids,
            // which `pg_stat_activity` does not show. One released into the transaction (it holds
            // no lock any more: its parent decides), one still open (`pg_locks` names its session).
            try reader.execute("SAVEPOINT released")
            try reader.execute("CREATE TEMPORARY TABLE released_of_the_test (id int)")
            try reader.execute("RELEASE SAVEPOINT released")
            try reader.execute("SAVEPOINT open")
            try reader.execute("CREATE TEMPORARY TABLE open_of_the_test (id int)")
            // Nothing has ended since the reader's transaction began: the snapshot lists none of
            // its three ids (all at or past the snapshot's xmax), and each is still found and seen
            // to never append.
            let first = try NewEvent(MessageSent(conversationId: "c1", messageId: "m-first", authorSide: .buyer, authorId: "buyer", body: "Hi"))
            let firstOutcome = try await db.client.withConnection { connection in
                try InlineProjections().appendReporting([first], on: connection).outcome
            }
            #expect(firstOutcome.applied == ["bell", "threads"], "deferred: \(firstOutcome.deferred)")
            // Committed after the reader's transaction began, and not projected.
            _ = try await db.store.append(
                try NewEvent(MessageSent(conversationId: "c1", messageId: "m0", authorSide: .buyer, authorId: "buyer", body: "Hello")))

            let message = try NewEvent(MessageSent(conversationId: "c1", messageId: "m1", authorSide: .seller, authorId: "s", body: "Yes"))
            let outcome = try await db.client.withConnection { connection in
                try InlineProjections().appendReporting([message], on: connection).outcome
            }
            #expect(outcome.applied == ["bell", "threads"], "deferred: \(outcome.deferred)")
            #expect(try await db.scalar("SELECT count(*)::int FROM messages", Int.self) == 3)
            // The reader's transaction is still the oldest open one.
            #expect(try reader.query("SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint").scalar(Int64.self) == readerXid)

            #expect {
                _ = try EventStore.append([try NewEvent(PasswordChanged(personId: "p1"))], on: reader)
            } throws: { error in
                (error as? PostgresError)?.sqlState == SQLState("WR003")
            }
            try reader.execute("ROLLBACK")
            try await db.withProjectors { try await db.waitUntilProjected() }
            #expect(try await db.scalar("SELECT count(*)::int FROM messages", Int.self) == 3)
            #expect(try await db.scalar("SELECT count(*)::int FROM events WHERE type = 'password_changed'", Int.self) == 0)
            #expect(try await db.countersThatDisagreeWithARecount().isEmpty)
        }
    }

    /// A replay's pool is marked as never appending: a replay's write transaction (a slice's
    /// COPYs, say) does not make an inline writer leave its projections to the projectors, and the
    /// database refuses an append on that pool.
    @Test func aReplaysOpenTransactionDoesNotHoldAnInlineWriterBackAndItsPoolCannotAppend() async throws {
        try await Self.withTheThreadProjected { db in
            let replayer = Replayer(client: db.client, projections: [ThreadsProjection()])
            try await replayer.client.withConnection { replaying in
                try replaying.execute("BEGIN")
                try replaying.execute("CREATE TEMPORARY TABLE written_by_the_replay (id int)")
                _ = try replaying.query("SELECT pg_current_xact_id()")
                let message = try NewEvent(MessageSent(conversationId: "c1", messageId: "m1", authorSide: .seller, authorId: "s", body: "Yes"))
                let outcome = try db.client.withConnectionBlocking { connection in
                    try InlineProjections().appendReporting([message], on: connection).outcome
                }
                #expect(outcome.applied == ["bell", "threads"], "deferred: \(outcome.deferred)")
                try replaying.execute("ROLLBACK")
            }
            await #expect {
                _ = try await EventStore(client: replayer.client).append(try NewEvent(PasswordChanged(personId: "p1")))
            } throws: { error in
                (error as? PostgresError)?.sqlState == SQLState("WR003")
            }
            #expect(try await db.scalar("SELECT count(*)::int FROM messages", Int.self) == 1)
        }
    }

    /// The checkpoint rows are locked in one statement for every projection concerned: when they
    /// cannot be had (here a lock timeout while another session holds one), the append still
    /// commits and every projection is left to the projector.
    @Test func anInlineAppendThatCannotLockTheCheckpointsCommitsAndLeavesThemToTheProjector() async throws {
        try await withTestDatabaseOnAClusterOfItsOwn { db in
            try await db.append(Self.started)
            try await db.withProjectors { try await db.waitUntilProjected() }
            let holder = try db.connect()
            defer { holder.close() }
            try holder.execute("BEGIN")
            try holder.query("SELECT 1 FROM projection_checkpoints WHERE projection = 'threads' FOR UPDATE")
            let message = try NewEvent(MessageSent(conversationId: "c1", messageId: "m1", authorSide: .seller, authorId: "s", body: "Yes"))
            let (appended, outcome) = try await db.client.withConnection { connection in
                try connection.execute("SET lock_timeout = '300ms'")
                defer { _ = try? connection.execute("RESET lock_timeout") }
                return try InlineProjections().appendReporting([message], on: connection)
            }
            #expect(appended.count == 1 && appended[0].wasAppended)
            #expect(outcome.applied.isEmpty)
            #expect(outcome.deferred == ["bell", "threads"])
            try holder.execute("COMMIT")
            try await db.withProjectors { try await db.waitUntilProjected() }
            #expect(try await db.scalar("SELECT count(*)::int FROM messages WHERE message_id = 'm1'", Int.self) == 1)
            #expect(try await db.countersThatDisagreeWithARecount().isEmpty)
        }
    }

    @Test func theLiveTablesAreCreatedByTheFirstProjectorAndRecordTheirVersion() async throws {
        try await withTestDatabase { db in
            try await db.withProjectors { try await db.waitUntilProjected() }
            let versions = try await db.client.query("SELECT projection, version FROM projection_checkpoints ORDER BY 1") {
                "\(try $0.decode(String.self, "projection"))=\(try $0.decode(Int32.self, "version"))"
            }
            #expect(versions == InboxProjections.all.sorted { $0.name < $1.name }.map { "\($0.name)=\($0.version)" })
        }
    }
}

/// What the projector does with a failure depends on whose it is.
@Suite struct FailureClassificationTests {
    @Test func onlyFailuresThatComeFromTheEventsPark() {
        var integrity = PostgresError(.server, "duplicate key")
        integrity.sqlState = .uniqueViolation
        var data = PostgresError(.server, "value too long")
        data.sqlState = SQLState("22001")
        var deadlock = PostgresError(.server, "deadlock detected")
        deadlock.sqlState = .deadlockDetected
        var disk = PostgresError(.server, "could not extend file")
        disk.sqlState = SQLState("53100")
        let lost = PostgresError(.connectionLost, "server closed the connection")
        #expect(ProjectionBatchApplier.isAboutTheEvents(ProjectionError("conversation x was never started")))
        #expect(ProjectionBatchApplier.isAboutTheEvents(integrity))
        #expect(ProjectionBatchApplier.isAboutTheEvents(data))
        #expect(!ProjectionBatchApplier.isAboutTheEvents(deadlock))
        #expect(!ProjectionBatchApplier.isAboutTheEvents(disk))
        #expect(!ProjectionBatchApplier.isAboutTheEvents(lost))
        #expect(deadlock.isTransient && disk.isTransient && lost.isTransient && !integrity.isTransient)
    }
}

/// Two replays of one projection never run at once.
@Suite struct ReplayLockTests {
    @Test func aSecondReplayOfTheSameProjectionIsRefusedUntilTheFirstEnds() async throws {
        try await withTestDatabase { db in
            let first = try await Replayer(client: db.client, projections: [BellProjection(), PeopleProjection()]).lock()
            await #expect(throws: ProjectionError.self) {
                _ = try await Replayer(client: db.client, projections: [BellProjection()]).lock()
            }
            // Another projection is free.
            let other = try await Replayer(client: db.client, projections: [ThreadsProjection()]).lock()
            other.close()
            first.close()
            var second: PostgresSession?
            for _ in 0..<100 where second == nil {
                second = try? await Replayer(client: db.client, projections: [BellProjection()]).lock()
                if second == nil { try await Task.sleep(for: .milliseconds(20)) }
            }
            #expect(second != nil, "the lock was released when the first replay's session closed")
            second?.close()
        }
    }
}

/// A projector of another release than the live tables' gives its lease up.
@Suite struct VersionTests {
    /// The people projection as a release that changed its tables would have it.
    struct NextPeople: Projection {
        let base = PeopleProjection()
        var name: String { base.name }
        var version: Int { base.version + 1 }
        var tableNames: [String] { base.tableNames }
        var eventTypes: Set<String> { base.eventTypes }
        func createTables(in context: ProjectionContext) throws { try base.createTables(in: context) }
        func createIndexes(in context: ProjectionContext) throws { try base.createIndexes(in: context) }
        func apply(_ events: [ProjectedEvent], in context: ProjectionContext) throws { try base.apply(events, in: context) }
    }

    @Test func aProjectorOfAnotherVersionGivesItsLeaseUpSoTheRightOneKeepsTheTablesCurrent() async throws {
        try await withTestDatabase { db in
            try await db.withProjectors([PeopleProjection()]) { try await db.waitUntilProjected([PeopleProjection()]) }
            let reports = Reports()
            let newer = Task {
                try await Projector(
                    projection: NextPeople(), configuration: db.configuration,
                    options: .init(pollInterval: .milliseconds(100), leaseRetry: .milliseconds(20)), report: { reports.add($0) }
                ).run()
            }
            defer { newer.cancel() }
            for _ in 0..<200 where !reports.contains(.versionMismatch(live: 1, code: 2)) { try await Task.sleep(for: .milliseconds(20)) }
            #expect(reports.contains(.versionMismatch(live: 1, code: 2)))
            // The release that matches the tables gets the lease and projects.
            try await db.append(ShopMemberAdded(shopId: "s1", personId: "p1"))
            try await db.withProjectors([PeopleProjection()]) { try await db.waitUntilProjected([PeopleProjection()], timeout: .seconds(30)) }
            #expect(try await db.scalar("SELECT count(*)::int FROM shop_members", Int.self) == 1)
            #expect(reports.all.filter { if case .applied = $0 { true } else { false } }.isEmpty, "the newer release applied nothing")
            newer.cancel()
            _ = await newer.result
        }
    }

    @Test func aProjectorWhoseSessionsAreKilledTakesItsLeaseAgainAndGoesOnWithoutARestart() async throws {
        try await withTestDatabase { db in
            let reports = Reports()
            let projector = Task {
                try await Projector(
                    projection: PeopleProjection(), configuration: db.configuration,
                    options: .init(pollInterval: .seconds(60), leaseRetry: .milliseconds(20), backoff: Backoff(initial: .milliseconds(10))),
                    report: { reports.add($0) }
                ).run()
            }
            defer { projector.cancel() }
            try await db.append(ShopMemberAdded(shopId: "s1", personId: "p1"))
            try await db.waitUntilProjected([PeopleProjection()])
            let killer = try db.connect()
            defer { killer.close() }
            let killed = try killer.query(
                """
                SELECT count(pg_terminate_backend(pid))::int FROM pg_stat_activity
                WHERE datname = current_database() AND application_name LIKE 'inbox-project-people%'
                """
            ).scalar(Int.self)
            #expect(killed == 2, "the lease's session and the listener's (batch by batch it reads on the lease's)")
            try await db.append(ShopMemberAdded(shopId: "s1", personId: "p2"))
            try await db.waitUntilProjected([PeopleProjection()], timeout: .seconds(30))
            #expect(try await db.scalar("SELECT count(*)::int FROM shop_members", Int.self) == 2)
            let leases = reports.all.compactMap { report -> Int32? in if case .tookLease(let pid) = report { pid } else { nil } }
            #expect(leases.count == 2 && leases.first != leases.last, "\(reports.all)")
        }
    }

    final class Reports: @unchecked Sendable {
        private let lock = NSLock()
        private var items: [Projector.Report] = []
        func add(_ report: Projector.Report) { lock.withLock { items.append(report) } }
        func contains(_ report: Projector.Report) -> Bool { lock.withLock { items.contains(report) } }
        var all: [Projector.Report] { lock.withLock { items } }
    }
}

/// The bell's entry ids: what replays and every node must agree on.
@Suite struct NotificationIdTests {
    @Test func aBellEntrysIdIsAStableVersion8UUIDOfItsPositionAndRecipient() throws {
        let id = BellProjection.notificationId(position: 1204518, recipient: "p7")
        #expect(id == BellProjection.notificationId(position: 1204518, recipient: "p7"), "a replay makes the same id")
        #expect(id != BellProjection.notificationId(position: 1204518, recipient: "p8"))
        #expect(id != BellProjection.notificationId(position: 1204519, recipient: "p7"))
        let uuid = try #require(UUID(uuidString: id))
        #expect(id == uuid.uuidString.lowercased())
        #expect(uuid.uuid.6 >> 4 == 8, "version 8: derived from SHA-256, not SHA-1's version 5")
        #expect(uuid.uuid.8 >> 6 == 0b10, "the RFC variant")
        #expect(BellProjection().version == 3, "ids changed with version 2 (live bells were replayed); version 3 added the audience's facts")
    }
}

/// The projector's read interval, timed: run on its own by `make test` (TIMED_SUITES), so that it
/// times the projector rather than a two-core machine busy with other suites.
@Suite struct ProjectorReadIntervalTests {
    /// While writers commit faster than `readInterval`, the projector reads the events of several
    /// commits at once: 12 appends 25 ms apart are applied in a few batches, not one each; the
    /// first, after a quiet moment, without waiting for the interval. On a cluster of its own:
    /// another test's open transaction would hold the reads back.
    @Test func aProjectorReadsTheEventsOfSeveralCommitsAtOnceWhileWritersCommitFasterThanItsReadInterval() async throws {
        try await withTestDatabaseOnAClusterOfItsOwn { db in
            let interval = Duration.seconds(3)
            try await db.append(PasswordChanged(personId: "p0"))
            let batches = Mutex<[Int]>([])
            let span = try await db.withProjectors(
                [BellProjection()], readInterval: interval,
                report: { report in
                    if case .applied(let events, _, _) = report { batches.withLock { $0.append(events) } }
                }
            ) {
                try await db.waitUntilProjected([BellProjection()])
                // A quiet moment longer than the interval: the next write is read at once.
                try await Task.sleep(for: interval + .milliseconds(200))
                batches.withLock { $0.removeAll() }
                let appended = ContinuousClock.now
                try await db.append(PasswordChanged(personId: "p1"))
                while batches.withLock({ $0.isEmpty }) { try await Task.sleep(for: .milliseconds(5)) }
                #expect(ContinuousClock.now - appended < interval / 2, "the first write after a quiet moment waited for the interval")
                let start = ContinuousClock.now
                for person in 2..<14 {
                    try await db.append(PasswordChanged(personId: "p\(person)"))
                    try await Task.sleep(for: .milliseconds(25))
                }
                let span = ContinuousClock.now - start
                try await db.waitUntilProjected([BellProjection()])
                return span
            }
            let applied = batches.withLock { $0 }
            #expect(applied.reduce(0, +) == 13)
            // One read for p1, then at most one per interval while the others were appended, and the last.
            let most = 3 + Int(span / interval)
            #expect(applied.count <= most, "13 appends, the last 12 over \(span), read at most every \(interval): \(applied)")
            #expect(try await db.scalar("SELECT count(*)::int FROM bell_entries", Int.self) == 14)
        }
    }
}
