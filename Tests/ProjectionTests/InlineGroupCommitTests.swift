import EventLog
import Foundation
import InboxDomain
import InboxTesting
import PostgresClient
@testable import Projections
import Testing

/// Group commit of the inline driver: concurrent appends share a transaction, and each still gets
/// exactly its own events, or its own error.
@Suite struct InlineGroupCommitTests {
    struct Refused: Error, Equatable {}

    /// Waits (a few seconds at most) until `condition` holds.
    static func waitFor(_ what: String, _ condition: () -> Bool) async throws {
        let deadline = ContinuousClock.now + .seconds(20)
        while !condition() {
            if ContinuousClock.now > deadline { Issue.record("timed out waiting for \(what)"); throw Refused() }
            try await Task.sleep(for: .milliseconds(5))
        }
    }

    /// Starts an append on a thread and connection of its own; the task returns its result.
    static func appendOnThread(
        _ db: TestDatabase, _ inline: InlineProjections, _ events: [NewEvent], expectedVersions: [String: ExpectedVersion] = [:],
        also: (@Sendable (PostgresConnection) throws -> Void)? = nil
    ) -> Task<Result<[AppendedEvent], any Error>, Never> {
        Task {
            do {
                return .success(
                    try await BlockingThread.run {
                        let connection = try db.connect()
                        defer { connection.close() }
                        return try inline.append(events, expectedVersions: expectedVersions, on: connection, also: also)
                    })
            } catch {
                return .failure(error)
            }
        }
    }

    /// A leader held inside its group (its `also` waits for an advisory lock the test holds), so
    /// the requests started meanwhile queue and form the next group, deterministically. The tests
    /// that use it run on a cluster of their own: the held leader has appended, so its open
    /// transaction would hold back the log's readers of every other test on the shared cluster.
    static func withLeaderHeld(
        _ db: TestDatabase, _ inline: InlineProjections, key: Int64, queue: () -> Int,
        _ body: () async throws -> Void
    ) async throws -> Result<[AppendedEvent], any Error> {
        let holder = try db.connect()
        defer { holder.close() }
        try holder.query("SELECT pg_advisory_lock($1)", key)
        let leader = appendOnThread(
            db, inline, [try NewEvent(PasswordChanged(personId: "leader-\(key)"))],
            also: { connection in _ = try connection.query("SELECT pg_advisory_xact_lock($1)", key) })
        let committer = try #require(inline.groupCommit)
        try await waitFor("the leader to run") { committer.state.running }
        try await body()
        try await waitFor("the requests to queue") { committer.state.queued == queue() }
        try holder.query("SELECT pg_advisory_unlock($1)", key)
        return await leader.value
    }

    static func count(_ db: TestDatabase, stream: String) async throws -> Int {
        try await db.client.withConnection { connection in
            try connection.query("SELECT count(*)::int FROM events WHERE stream_id = $1", stream).scalar(Int.self)
        }
    }

    @Test func concurrentAppendsEachGetTheirOwnEventsOnceAndShareTransactions() async throws {
        try await withTestDatabase { db in
            let threads = 32
            let perThread = 50
            var versions: [Int64] = []
            for thread in 0..<threads {
                let appended = try await db.store.append(
                    try NewEvent(ConversationStarted(conversationId: "c\(thread)", buyerId: "b\(thread)", shopId: "shop", watchId: "w\(thread)")))
                versions.append(appended.event.streamVersion)
            }
            // The live tables exist and have what came before, so the inline driver can apply.
            try await db.withProjectors { try await db.waitUntilProjected() }
            let inline = InlineProjections()
            let starting = versions
            let results = try await withThrowingTaskGroup(of: [(String, AppendedEvent, Bool)].self) { group in
                for thread in 0..<threads {
                    group.addTask {
                        try await BlockingThread.run {
                            let connection = try db.connect()
                            defer { connection.close() }
                            let stream = Streams.conversation("c\(thread)")
                            var version = starting[thread]
                            var mine: [(String, AppendedEvent, Bool)] = []
                            for index in 0..<perThread {
                                let id = "m\(thread)-\(index)"
                                let event = try NewEvent(
                                    MessageSent(conversationId: "c\(thread)", messageId: id, authorSide: .buyer, authorId: "b\(thread)", body: "n\(index)"))
                                // Half the writers wait on a connection of their own, half holding none.
                                let (appended, outcome) =
                                    thread % 2 == 0
                                    ? try inline.appendReporting([event], expectedVersions: [stream: .exactly(version)], on: connection)
                                    : try inline.appendReporting([event], expectedVersions: [stream: .exactly(version)], using: db.client)
                                guard appended.count == 1 else { throw Refused() }
                                version = appended[0].event.streamVersion
                                // Read-your-writes on the writer's own connection.
                                let inLog = try connection.query("SELECT count(*)::int FROM events WHERE position = $1", appended[0].event.position)
                                    .scalar(Int.self)
                                var readable = inLog == 1
                                if outcome.applied.contains("threads") {
                                    let projected = try connection.query("SELECT count(*)::int FROM messages WHERE message_id = $1", id).scalar(Int.self)
                                    readable = readable && projected == 1
                                }
                                mine.append((id, appended[0], readable))
                            }
                            return mine
                        }
                    }
                }
                var all: [(String, AppendedEvent, Bool)] = []
                for try await mine in group { all += mine }
                return all
            }
            #expect(results.count == threads * perThread)
            // Each got exactly its own event back: its message id, in its stream, newly appended.
            for (id, appended, readable) in results {
                #expect(appended.wasAppended)
                #expect(appended.event.payloadJSON.contains("\"\(id)\""), "\(id): \(appended.event.payloadJSON)")
                #expect(appended.event.streamId == Streams.conversation("c" + id.dropFirst().prefix { $0 != "-" }))
                #expect(readable, "\(id) not readable by its writer")
            }
            #expect(Set(results.map(\.1.event.position)).count == results.count)
            let inLog = try await db.scalar("SELECT count(*)::int FROM events WHERE type = 'message_sent'", Int.self)
            #expect(inLog == threads * perThread)
            let distinct = try await db.scalar("SELECT count(DISTINCT payload->>'messageId')::int FROM events WHERE type = 'message_sent'", Int.self)
            #expect(distinct == threads * perThread)
            // Appends did share transactions.
            let counts = try #require(inline.groupCommit).counts
            #expect(counts.requests == threads * perThread)
            #expect(counts.groups < counts.requests, "\(counts)")
            #expect(counts.largestGroup > 1)
            let transactions = try await db.scalar("SELECT count(DISTINCT transaction_id)::int FROM events WHERE type = 'message_sent'", Int.self)
            #expect(transactions == counts.groups)
            // Whatever was applied inline or left to the projector, the read models end up exact.
            try await db.withProjectors { try await db.waitUntilProjected() }
            #expect(try await db.scalar("SELECT count(*)::int FROM messages", Int.self) == threads * perThread)
            #expect(try await db.countersThatDisagreeWithARecount().isEmpty)
        }
    }

    /// Writers that wait holding a connection of the pool and writers that wait holding none share
    /// one committer: a leader that needs a connection from the pool must not wait for one while
    /// every connection is held by a request waiting for that leader's group.
    @Test func writersHoldingPooledConnectionsAndWritersHoldingNoneDoNotWaitForEachOther() async throws {
        try await withTestDatabase { db in
            let pool = try PostgresClient(configuration: .init(connection: db.configuration, maximumConnections: 2))
            defer { pool.close() }
            let inline = InlineProjections()
            let writers = 8
            let each = 25
            // Threads of their own, not awaited: if they stall, the test fails instead of hanging.
            final class Progress: @unchecked Sendable {
                let lock = NSLock()
                var done = 0
                var errors: [String] = []
            }
            let progress = Progress()
            for writer in 0..<writers {
                Thread {
                    for index in 0..<each {
                        do {
                            let event = try NewEvent(PasswordChanged(personId: "w\(writer)-\(index)"))
                            if writer % 2 == 0 {
                                try pool.withConnectionBlocking { connection in _ = try inline.append([event], on: connection) }
                            } else {
                                try inline.append([event], using: pool)
                            }
                        } catch {
                            progress.lock.withLock { progress.errors.append("\(error)") }
                        }
                        progress.lock.withLock { progress.done += 1 }
                    }
                }.start()
            }
            let deadline = ContinuousClock.now + .seconds(60)
            var finished = 0
            while ContinuousClock.now < deadline {
                finished = progress.lock.withLock { progress.done }
                if finished == writers * each { break }
                try await Task.sleep(for: .milliseconds(20))
            }
            #expect(progress.lock.withLock { progress.errors }.isEmpty)
            try #require(finished == writers * each, "the writers stalled: \(finished) of \(writers * each) appends returned in 60 s")
            #expect(try await db.scalar("SELECT count(*)::int FROM events WHERE type = 'password_changed'", Int.self) == writers * each)
        }
    }

    @Test func aRefusedRequestGetsItsOwnErrorWhileTheRestOfItsGroupCommits() async throws {
        try await withTestDatabaseOnAClusterOfItsOwn { db in
            try await db.append(PasswordChanged(personId: "taken"))
            let keyed = try NewEvent(PasswordChanged(personId: "keyed"), idempotencyKey: "k-keyed")
            _ = try await db.store.append([keyed])
            let inline = InlineProjections()
            // Refused by the checks before it ever joins a group.
            #expect(throws: EventLogError.self) {
                let connection = try db.connect()
                defer { connection.close() }
                try inline.append([NewEvent(streamId: "", type: "password_changed", payloadJSON: #"{"personId":"x"}"#, metadata: EventMetadata())], on: connection)
            }
            var fine: Task<Result<[AppendedEvent], any Error>, Never>?
            var conflicting: Task<Result<[AppendedEvent], any Error>, Never>?
            var failing: Task<Result<[AppendedEvent], any Error>, Never>?
            var repeated: Task<Result<[AppendedEvent], any Error>, Never>?
            var reusing: Task<Result<[AppendedEvent], any Error>, Never>?
            var fineToo: Task<Result<[AppendedEvent], any Error>, Never>?
            var started = 0
            let leader = try await Self.withLeaderHeld(db, inline, key: 7_101, queue: { 6 }) {
                fine = Self.appendOnThread(db, inline, [try NewEvent(PasswordChanged(personId: "fine"))])
                conflicting = Self.appendOnThread(
                    db, inline, [try NewEvent(PasswordChanged(personId: "taken"))], expectedVersions: [Streams.security("taken"): .noStream])
                failing = Self.appendOnThread(db, inline, [try NewEvent(PasswordChanged(personId: "undone"))], also: { _ in throw Refused() })
                try await Self.waitFor("three to queue") { inline.groupCommit?.state.queued == 3 }
                // Three plain requests in a row, tried as one statement: one repeats an event by
                // its key (the original comes back), one reuses a key for another event (refused).
                repeated = Self.appendOnThread(db, inline, [keyed])
                try await Self.waitFor("four to queue") { inline.groupCommit?.state.queued == 4 }
                reusing = Self.appendOnThread(db, inline, [try NewEvent(PasswordChanged(personId: "other"), idempotencyKey: "k-keyed")])
                try await Self.waitFor("five to queue") { inline.groupCommit?.state.queued == 5 }
                fineToo = Self.appendOnThread(db, inline, [try NewEvent(PasswordChanged(personId: "fine-too"))])
                started = 6
            }
            #expect(started == 6)
            _ = try leader.get()
            let fineTask = try #require(fine)
            let fineEvents = try await fineTask.value.get()
            #expect(fineEvents.count == 1 && fineEvents[0].event.streamId == Streams.security("fine"))
            let conflictingTask = try #require(conflicting)
            switch await conflictingTask.value {
            case .success: Issue.record("an append with a wrong expected version succeeded")
            case .failure(let error):
                guard case EventLogError.wrongExpectedVersion(let stream, _, _) = error else { Issue.record("\(error)"); break }
                #expect(stream == Streams.security("taken"))
            }
            let failingTask = try #require(failing)
            switch await failingTask.value {
            case .success: Issue.record("an append whose savepoint work threw succeeded")
            case .failure(let error): #expect(error as? Refused == Refused())
            }
            let repeatedTask = try #require(repeated)
            let original = try await repeatedTask.value.get()
            #expect(original.count == 1 && !original[0].wasAppended && original[0].event.idempotencyKey == "k-keyed")
            let reusingTask = try #require(reusing)
            switch await reusingTask.value {
            case .success: Issue.record("a reused idempotency key was accepted")
            case .failure(let error):
                guard case EventLogError.idempotencyKeyReused(_, let key) = error else { Issue.record("\(error)"); break }
                #expect(key == "k-keyed")
            }
            let fineTooTask = try #require(fineToo)
            let fineTooEvents = try await fineTooTask.value.get()
            #expect(fineTooEvents.count == 1 && fineTooEvents[0].wasAppended && fineTooEvents[0].event.streamId == Streams.security("fine-too"))
            #expect(fineTooEvents[0].event.transactionId == fineEvents[0].event.transactionId, "one transaction for the group")
            // One group of the leader, one of the six queued behind it.
            let counts = try #require(inline.groupCommit).counts
            #expect(counts.groups == 2 && counts.requests == 7 && counts.largestGroup == 6, "\(counts)")
            #expect(try await Self.count(db, stream: Streams.security("keyed")) == 1)
            #expect(try await Self.count(db, stream: Streams.security("other")) == 0)
            #expect(try await Self.count(db, stream: Streams.security("fine-too")) == 1)
            #expect(try await Self.count(db, stream: Streams.security("fine")) == 1)
            #expect(try await Self.count(db, stream: Streams.security("taken")) == 1)
            #expect(try await Self.count(db, stream: Streams.security("undone")) == 0)
            #expect(try await Self.count(db, stream: Streams.security("leader-7101")) == 1)
        }
    }

    /// Drivers with other projections may share one committer (the API's routes do): a group
    /// applies every projection any of its requests asks for, to all of its events, and each
    /// request is told of the projections of its own driver.
    @Test func driversWithOtherProjectionsShareAGroupAndEachIsToldOfItsOwn() async throws {
        try await withTestDatabaseOnAClusterOfItsOwn { db in
            try await db.append(ConversationStarted(conversationId: "c1", buyerId: "buyer", shopId: "shop", watchId: "w1"))
            try await db.withProjectors { try await db.waitUntilProjected() }
            let committer = InlineGroupCommit()
            let everything = InlineProjections(groupCommit: committer)
            let threads = InlineProjections(projections: [ThreadsProjection()], groupCommit: committer)
            let bell = InlineProjections(projections: [BellProjection()], groupCommit: committer)
            func reporting(_ driver: InlineProjections, _ event: NewEvent) -> Task<InlineProjections.Outcome?, Never> {
                Task {
                    try? await BlockingThread.run {
                        let connection = try db.connect()
                        defer { connection.close() }
                        return try driver.appendReporting([event], on: connection).outcome
                    }
                }
            }
            var message: Task<InlineProjections.Outcome?, Never>?
            var signIn: Task<InlineProjections.Outcome?, Never>?
            let leader = try await Self.withLeaderHeld(db, everything, key: 7_301, queue: { 2 }) {
                message = reporting(
                    threads, try NewEvent(MessageSent(conversationId: "c1", messageId: "m1", authorSide: .seller, authorId: "s", body: "Yes")))
                signIn = reporting(bell, try NewEvent(PasswordChanged(personId: "p1")))
            }
            _ = try leader.get()
            let messageOutcome = try #require(await message?.value)
            let signInOutcome = try #require(await signIn?.value)
            #expect(messageOutcome.applied == ["threads"] && messageOutcome.deferred.isEmpty, "\(messageOutcome)")
            #expect(signInOutcome.applied == ["bell"] && signInOutcome.deferred.isEmpty, "\(signInOutcome)")
            let counts = committer.counts
            #expect(counts.groups == 2 && counts.largestGroup == 2, "the two shared a group: \(counts)")
            // The message's group applied the bell too, which the threads' driver alone would not
            // have: its notification for the buyer is queued with no projector running.
            #expect(try await db.scalar("SELECT count(*)::int FROM messages WHERE message_id = 'm1'", Int.self) == 1)
            #expect(try await db.scalar("SELECT count(*)::int FROM notification_outbox WHERE recipient_id = 'buyer'", Int.self) == 1)
            #expect(try await db.scalar("SELECT count(*)::int FROM bell_entries WHERE person_id = 'p1'", Int.self) == 1)
            try await db.withProjectors { try await db.waitUntilProjected() }
            #expect(try await db.scalar("SELECT count(*)::int FROM messages WHERE message_id = 'm1'", Int.self) == 1)
            #expect(try await db.scalar("SELECT count(*)::int FROM notification_outbox WHERE recipient_id = 'buyer'", Int.self) == 1)
            #expect(try await db.countersThatDisagreeWithARecount().isEmpty)
        }
    }

    @Test func aFailedCommitFailsTheWholeGroupAndAppendsNothing() async throws {
        try await withTestDatabaseOnAClusterOfItsOwn { db in
            // A deferred constraint trigger: the row is accepted, the COMMIT is refused.
            try await db.client.withConnection { connection in
                _ = try connection.execute(
                    """
                    CREATE TABLE group_commit_poison (x int);
                    CREATE FUNCTION group_commit_refuse() RETURNS trigger LANGUAGE plpgsql AS
                        $$ BEGIN RAISE EXCEPTION 'poisoned group'; END $$;
                    CREATE CONSTRAINT TRIGGER group_commit_refuse AFTER INSERT ON group_commit_poison
                        DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION group_commit_refuse();
                    """)
                return ()
            }
            let inline = InlineProjections()
            var innocent: Task<Result<[AppendedEvent], any Error>, Never>?
            var poisoning: Task<Result<[AppendedEvent], any Error>, Never>?
            let leader = try await Self.withLeaderHeld(db, inline, key: 7_102, queue: { 2 }) {
                innocent = Self.appendOnThread(db, inline, [try NewEvent(PasswordChanged(personId: "innocent"))])
                try await Self.waitFor("the first to queue") { inline.groupCommit?.state.queued == 1 }
                poisoning = Self.appendOnThread(
                    db, inline, [try NewEvent(PasswordChanged(personId: "poisoning"))],
                    also: { connection in _ = try connection.execute("INSERT INTO group_commit_poison VALUES (1)") })
            }
            _ = try leader.get()
            for task in [innocent, poisoning] {
                let task = try #require(task)
                switch await task.value {
                case .success(let appended): Issue.record("acknowledged, though its group did not commit: \(appended)")
                case .failure(let error): #expect("\(error)".contains("poisoned group"), "\(error)")
                }
            }
            #expect(try #require(inline.groupCommit).counts.largestGroup == 2)
            #expect(try await Self.count(db, stream: Streams.security("innocent")) == 0)
            #expect(try await Self.count(db, stream: Streams.security("poisoning")) == 0)
            // The next group commits as usual.
            let after = try await Self.appendOnThread(db, inline, [try NewEvent(PasswordChanged(personId: "after"))]).value.get()
            #expect(after.count == 1)
            #expect(try await Self.count(db, stream: Streams.security("after")) == 1)
        }
    }
}
