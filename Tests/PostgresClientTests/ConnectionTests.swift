import Foundation
import InboxTesting
import PostgresClient
import Testing

@Suite struct ConnectionTests {
    @Test func aTransactionRollsBackWhenItsBodyThrows() async throws {
        let db = try await TestDatabase.make(migrated: false)
        defer { Task { await db.drop() } }
        struct Refused: Error {}
        try await db.client.execute("CREATE TABLE bell (id int PRIMARY KEY)")
        await #expect(throws: Refused.self) {
            try await db.client.transaction { connection in
                _ = try connection.query("INSERT INTO bell VALUES ($1)", Int32(1))
                throw Refused()
            }
        }
        try await db.client.transaction { connection in _ = try connection.query("INSERT INTO bell VALUES ($1)", Int32(2)) }
        let ids = try await db.client.query("SELECT id FROM bell ORDER BY id") { try $0.decode(Int32.self, "id") }
        #expect(ids == [2])
    }

    /// A multi-host URL (libpq's `host=a,b` with `target_session_attrs=read-write`, what a
    /// Patroni cluster's clients are given) connects to the first host that answers and takes
    /// writes: here the first is a socket folder where no server listens. No short
    /// `connect_timeout`: the missing folder fails at once, and a limit of 2 s on the real
    /// server timed out once in CI, with the suite's other tests loading both cores.
    @Test func aMultiHostURLConnectsToTheHostThatAnswers() async throws {
        let db = try await TestDatabase.make(migrated: false)
        defer { Task { await db.drop() } }
        let url = try #require(ProcessInfo.processInfo.environment["INBOX_TEST_DATABASE_URL"])
        let folder = try #require(URLComponents(string: url)?.queryItems?.first { $0.name == "host" }?.value)
        let name = try await db.client.query("SELECT current_database() AS name") { try $0.decode(String.self, "name") }[0]
        let multiHost = "postgres:///\(name)?host=/nonexistent-\(UUID().uuidString.prefix(8)),\(folder)&user=inbox&target_session_attrs=read-write"
        let client = try PostgresClient(url: multiHost, maximumConnections: 1)
        defer { client.close() }
        try await client.execute("CREATE TABLE written (id int)")
        try await client.execute("INSERT INTO written VALUES (1)")
        #expect(try await db.client.query("SELECT count(*)::int AS n FROM written") { try $0.decode(Int.self, "n") } == [1])
    }

    @Test func serverErrorsCarryTheirSQLState() async throws {
        let db = try await TestDatabase.make(migrated: false)
        defer { Task { await db.drop() } }
        try await db.client.execute("CREATE TABLE devices (token text PRIMARY KEY)")
        try await db.client.execute("INSERT INTO devices VALUES ('a')")
        let unique = await #expect(throws: PostgresError.self) { try await db.client.execute("INSERT INTO devices VALUES ('a')") }
        #expect(unique?.isUniqueViolation == true)
        #expect(unique?.sqlState == .uniqueViolation)
        #expect(unique?.constraint == "devices_pkey")
        let serialization = await #expect(throws: PostgresError.self) {
            try await db.client.execute("DO $$ BEGIN RAISE EXCEPTION 'conflict' USING ERRCODE = '40001'; END $$")
        }
        #expect(serialization?.isSerializationFailure == true)
        #expect(serialization?.isUniqueViolation == false)
    }

    @Test func aKilledSessionIsAConnectionErrorAndTheNextCallReconnects() async throws {
        let db = try await TestDatabase.make(migrated: false, poolSize: 1)
        defer { Task { await db.drop() } }
        let pid = try await db.client.withConnection { $0.backendPID }
        let killer = try db.connect()
        defer { killer.close() }
        try killer.query("SELECT pg_terminate_backend($1)", pid)
        let lost = await #expect(throws: PostgresError.self) { try await db.client.execute("SELECT 1") }
        #expect(lost?.isConnectionError == true)
        let newPID = try await db.client.withConnection { $0.backendPID }
        #expect(newPID != pid)
        #expect(newPID != 0)
    }

    @Test func thePoolNeverOpensMoreSessionsThanItsSize() async throws {
        let db = try await TestDatabase.make(migrated: false, poolSize: 3)
        defer { Task { await db.drop() } }
        let pids = try await withThrowingTaskGroup(of: Int32.self) { group in
            for _ in 0..<12 {
                group.addTask { try await db.client.withConnection { connection in
                    try connection.query("SELECT pg_sleep(0.05)")
                    return connection.backendPID
                } }
            }
            var all: Set<Int32> = []
            for try await pid in group { all.insert(pid) }
            return all
        }
        #expect(pids.count <= 3)
        #expect(pids.count >= 1)
        // Its statistics: what it opened, all idle again, nobody waiting.
        let statistics = db.client.statistics
        #expect(statistics.open == pids.count && statistics.idle == pids.count && statistics.waiting == 0 && statistics.maximum == 3, "\(statistics)")
        try await db.client.withConnection { _ in
            let busy = db.client.statistics
            #expect(busy.open - busy.idle == 1, "one in use: \(busy)")
        }
    }

    /// Blocking libpq calls run on the connections' own threads, never on Swift's cooperative pool
    /// (which has one thread per core): eight calls that sleep in the server are all in flight at
    /// once on a two-core machine, as the server's own activity view shows. On the cooperative pool
    /// at most two could be, and the observer itself could not run while they wait.
    @Test func blockingCallsRunOnConnectionThreadsNotTheCooperativePool() async throws {
        let db = try await TestDatabase.make(migrated: false, poolSize: 8)
        defer { Task { await db.drop() } }
        let observer = try PostgresClient(configuration: .init(connection: db.configuration, maximumConnections: 1))
        defer { observer.close() }
        let sleepers = Task {
            try await withThrowingTaskGroup(of: Void.self) { group in
                // Long enough to overlap however slowly a loaded machine opens the eight sessions;
                // they are cancelled as soon as all eight were seen.
                for _ in 0..<8 { group.addTask { try await db.client.execute("SELECT pg_sleep(120) AS blocking_probe") } }
                try await group.waitForAll()
            }
        }
        var mostAtOnce: Int64 = 0
        // Looked at once more after every wait before the deadline is: on a loaded machine (every
        // suite starting at once on two cores) a wait can overrun by seconds.
        let deadline = ContinuousClock.now + .seconds(60)
        while true {
            let active = try await observer.withConnection { connection in
                try connection.query(
                    """
                    SELECT count(*) FROM pg_stat_activity
                    WHERE datname = current_database() AND state = 'active' AND query LIKE '%blocking_probe%'
                      AND pid <> pg_backend_pid()
                    """
                ).scalar(Int64.self)
            }
            mostAtOnce = max(mostAtOnce, active)
            if mostAtOnce >= 8 || ContinuousClock.now >= deadline { break }
            try await Task.sleep(for: .milliseconds(50))
        }
        try await observer.execute(
            """
            SELECT pg_cancel_backend(pid) FROM pg_stat_activity
            WHERE datname = current_database() AND query LIKE '%blocking_probe%' AND pid <> pg_backend_pid()
            """)
        _ = await sleepers.result
        #expect(mostAtOnce == 8)
    }

    @Test func aPipelineSendsEveryStatementAndReturnsResultsInOrder() async throws {
        let db = try await TestDatabase.make(migrated: false)
        defer { Task { await db.drop() } }
        try await db.client.execute("CREATE TABLE counters (person int PRIMARY KEY, unread int NOT NULL)")
        let results = try await db.client.withConnection { connection in
            var statements = (1...200).map { PostgresStatement("INSERT INTO counters VALUES ($1, $2)", Int32($0), Int32($0 * 2)) }
            statements.append(PostgresStatement("SELECT sum(unread)::bigint FROM counters"))
            return try connection.pipeline(statements).last?.scalar(Int64.self)
        }
        #expect(results == Int64((1...200).reduce(0) { $0 + $1 * 2 }))
    }

    @Test func aFailingStatementInAPipelineThrowsItsErrorAndSkipsTheRest() async throws {
        let db = try await TestDatabase.make(migrated: false)
        defer { Task { await db.drop() } }
        try await db.client.execute("CREATE TABLE t (id int PRIMARY KEY)")
        let error = await #expect(throws: PostgresError.self) {
            try await db.client.withConnection { connection in
                _ = try connection.pipeline([
                    PostgresStatement("INSERT INTO t VALUES (1)"), PostgresStatement("INSERT INTO t VALUES (1)"),
                    PostgresStatement("INSERT INTO t VALUES (2)"),
                ])
            }
        }
        #expect(error?.isUniqueViolation == true)
        // One implicit transaction: nothing of it stays.
        let count = try await db.client.withConnection { try $0.query("SELECT count(*) FROM t").scalar(Int64.self) }
        #expect(count == 0)
        // The connection is usable afterwards.
        try await db.client.execute("INSERT INTO t VALUES (3)")
    }

    @Test func copyLoadsRowsWithTabsNewlinesBackslashesAndNulls() async throws {
        let db = try await TestDatabase.make(migrated: false)
        defer { Task { await db.drop() } }
        try await db.client.execute("CREATE TABLE messages (id int, body text)")
        let bodies: [String?] = [
            "tab\there", "new\nline", "back\\slash", nil, "carriage\rreturn", "é ✓", "\\\t\n\r", "\tat both ends\\", "", "\\N",
        ]
        let loaded = try await db.client.withConnection { connection in
            try connection.copyIn("COPY messages (id, body) FROM STDIN") { writer in
                for index in 0..<10_000 {
                    try writer.write(row: [String(index), bodies[index % bodies.count]])
                }
            }
        }
        #expect(loaded == 10_000)
        let back = try await db.client.query("SELECT id, body FROM messages WHERE id < \(bodies.count) ORDER BY id") {
            try $0.decode(String?.self, "body")
        }
        #expect(back == bodies)

        // Out as COPY's text rows, and in again unchanged; a reader that fails leaves the connection usable.
        try await db.client.execute("CREATE TABLE copied (id int, body text)")
        try await db.client.withConnection { connection in
            var rows: [UInt8] = []
            let count = try connection.copyOut("COPY (SELECT id, body FROM messages ORDER BY id) TO STDOUT") { rows.append(contentsOf: $0) }
            #expect(count == 10_000)
            #expect(try connection.copyIn("COPY copied (id, body) FROM STDIN") { try $0.write(encodedRows: rows) } == 10_000)
            struct Stop: Error {}
            #expect(throws: Stop.self) { try connection.copyOut("COPY messages TO STDOUT") { _ in throw Stop() } }
            #expect(throws: PostgresError.self) { try connection.copyOut("SELECT 1") { _ in } }
            #expect(try connection.query("SELECT count(*) FROM copied c JOIN messages m USING (id) WHERE c.body IS NOT DISTINCT FROM m.body").scalar(Int64.self) == 10_000)
        }
    }

    @Test func listenReceivesANotifyAndTimesOutQuietly() async throws {
        let db = try await TestDatabase.make(migrated: false)
        defer { Task { await db.drop() } }
        let listener = try PostgresListener(configuration: db.configuration, channels: ["bell_changed"])
        try await listener.start()
        let quiet = try await listener.next(timeout: .milliseconds(100))
        #expect(quiet.isEmpty)
        try await db.client.withConnection { try $0.notify("bell_changed", payload: "person-7") }
        var received: [PostgresNotification] = []
        for _ in 0..<50 where received.isEmpty {
            received = try await listener.next(timeout: .milliseconds(100))
        }
        #expect(received.map(\.payload) == ["person-7"])
        #expect(received.first?.channel == "bell_changed")
    }

    /// A listener nobody waits on still reads its session: left unread, the server session blocks
    /// writing to it, and PostgreSQL then holds every committing NOTIFY of the database behind it.
    @Test func aListenerNobodyWaitsOnKeepsItsSessionReadAndHandsOutWhatCameInOrder() async throws {
        let db = try await TestDatabase.make(migrated: false)
        defer { Task { await db.drop() } }
        let listener = try PostgresListener(configuration: db.configuration, channels: ["bell_changed"], applicationName: "unread-listener")
        try await listener.start()
        let pid = try await listener.backendPID()
        // About 600 KB of notifications in one commit: more than a socket holds unread.
        let count = 9_000
        try await db.client.execute(
            "SELECT pg_notify('bell_changed', 'person-' || lpad(i::text, 40, '0')) FROM generate_series(1, \(count)) AS i")
        var state = ""
        for _ in 0..<100 {
            state = try await db.client.query("SELECT coalesce(wait_event, '') AS w FROM pg_stat_activity WHERE pid = $1", binds: [PostgresBind(pid)]) {
                try $0.decode(String.self, "w")
            }.first ?? "gone"
            if state == "ClientRead" { break }
            try await Task.sleep(for: .milliseconds(50))
        }
        #expect(state == "ClientRead", "the listening session should wait for its client, not block writing to it")
        var received: [PostgresNotification] = []
        for _ in 0..<100 where received.count < count {
            received += try await listener.next(timeout: .milliseconds(100))
        }
        #expect(received.count == count)
        #expect(received.first?.payload == "person-" + String(repeating: "0", count: 39) + "1")
        #expect(received.map(\.payload) == received.map(\.payload).sorted())
        // The same notice twice before anybody asks is handed out once.
        try await db.client.withConnection { try $0.notify("bell_changed", payload: "again") }
        try await db.client.withConnection { try $0.notify("bell_changed", payload: "again") }
        try await Task.sleep(for: .milliseconds(300))
        #expect(try await listener.next(timeout: .milliseconds(100)).map(\.payload) == ["again"])
    }

    @Test func aChannelNameThatIsNotAPlainIdentifierIsRefused() {
        #expect(throws: PostgresError.self) {
            try PostgresListener(configuration: PostgresConfiguration(url: "postgres:///x"), channels: ["bell; DROP TABLE x"])
        }
    }
}

@Suite struct HeldBackStatementTests {
    @Test func heldBackStatementsRunInFrontOfTheNextAndLeaveItsResultAlone() async throws {
        let db = try await TestDatabase.make(migrated: false)
        defer { Task { await db.drop() } }
        try await db.client.execute("CREATE TABLE marks (id int PRIMARY KEY)")
        try await db.client.withConnection { connection in
            connection.executeWithNext("BEGIN")
            // A held BEGIN already counts: an append inside asks this to pick its savepoint.
            #expect(connection.isInTransaction)
            connection.executeWithNext("SAVEPOINT a")
            // The query's own rows come back, not the held statements' empty results.
            let inserted = try connection.query("INSERT INTO marks VALUES ($1) RETURNING id", Int32(1))
            #expect(try inserted.scalar(Int32.self) == 1)
            connection.executeWithNext("RELEASE SAVEPOINT a")
            connection.executeWithNext("SAVEPOINT b")
            let piped = try connection.pipeline([PostgresStatement("SELECT count(*) FROM marks"), PostgresStatement("SELECT 7")])
            #expect(piped.count == 2)
            #expect(try piped[0].scalar(Int64.self) == 1)
            #expect(try piped[1].scalar(Int32.self) == 7)
            connection.executeWithNext("RELEASE SAVEPOINT b")
            let committed = try connection.execute("COMMIT")
            #expect(committed.commandTag == "COMMIT")
            #expect(!connection.isInTransaction)
        }
        #expect(try await db.client.query("SELECT count(*) FROM marks") { try $0.decode(Int64.self, at: 0) } == [1])
    }

    /// A statement with values held in front of a `COMMIT` (an inline projection's checkpoint
    /// update): they go in one pipeline; when the held one fails, the `COMMIT` does not run and
    /// its error is the `COMMIT`'s.
    @Test func aHeldStatementWithValuesGoesWithTheNextExecuteAndFailsIt() async throws {
        let db = try await TestDatabase.make(migrated: false)
        defer { Task { await db.drop() } }
        try await db.client.execute("CREATE TABLE marks (id int PRIMARY KEY CHECK (id > 0))")
        try await db.client.withConnection { connection in
            try connection.execute("BEGIN")
            connection.executeWithNext(PostgresStatement("INSERT INTO marks VALUES ($1)", Int32(1)))
            connection.executeWithNext("SAVEPOINT after_insert")
            connection.executeWithNext(PostgresStatement("INSERT INTO marks VALUES ($1)", Int32(2)))
            #expect(try connection.execute("COMMIT").commandTag == "COMMIT")
            #expect(!connection.isInTransaction)
            try connection.execute("BEGIN")
            connection.executeWithNext(PostgresStatement("INSERT INTO marks VALUES ($1)", Int32(3)))
            connection.executeWithNext(PostgresStatement("INSERT INTO marks VALUES ($1)", Int32(-1)))
            let refused = #expect(throws: PostgresError.self) { try connection.execute("COMMIT") }
            #expect(refused?.sqlState == .checkViolation, "\(String(describing: refused))")
            #expect(connection.isTransactionFailed)
            try connection.execute("ROLLBACK")
            // Asking about the transaction sends what is held, with its values.
            try connection.execute("BEGIN")
            connection.executeWithNext(PostgresStatement("INSERT INTO marks VALUES ($1)", Int32(4)))
            #expect(!connection.isTransactionFailed)
            try connection.execute("COMMIT")
        }
        #expect(try await db.client.query("SELECT id FROM marks ORDER BY id") { try $0.decode(Int32.self, at: 0) } == [1, 2, 4])
    }

    /// `transaction` ends its transaction whatever fails: a held statement that fails its `COMMIT`
    /// (the `COMMIT` then did not run) is rolled back, and a body that throws with statements held
    /// rolls back without sending them.
    @Test func aTransactionWhoseHeldStatementFailsItsCommitIsRolledBack() async throws {
        let db = try await TestDatabase.make(migrated: false)
        defer { Task { await db.drop() } }
        try await db.client.execute("CREATE TABLE marks (id int PRIMARY KEY CHECK (id > 0))")
        struct Refused: Error {}
        try await db.client.withConnection { connection in
            #expect(throws: PostgresError.self) {
                try connection.transaction { connection in
                    try connection.query("INSERT INTO marks VALUES ($1)", Int32(1))
                    connection.executeWithNext(PostgresStatement("INSERT INTO marks VALUES ($1)", Int32(-1)))
                }
            }
            #expect(!connection.isInTransaction)
            #expect(throws: Refused.self) {
                try connection.transaction { connection in
                    try connection.query("INSERT INTO marks VALUES ($1)", Int32(2))
                    connection.executeWithNext(PostgresStatement("INSERT INTO marks VALUES ($1)", Int32(3)))
                    throw Refused()
                }
            }
            #expect(!connection.isInTransaction)
            try connection.transaction { connection in _ = try connection.query("INSERT INTO marks VALUES ($1)", Int32(4)) }
        }
        #expect(try await db.client.query("SELECT id FROM marks ORDER BY id") { try $0.decode(Int32.self, at: 0) } == [4])
    }

    /// `transaction`'s `BEGIN` goes with the body's first statement: a transaction of one statement
    /// is two round trips (it and the `COMMIT`), its isolation level is the one asked for, and a
    /// first statement that fails fails the transaction, which is rolled back.
    @Test func aTransactionsBeginGoesWithItsFirstStatement() async throws {
        let db = try await TestDatabase.make(migrated: false)
        defer { Task { await db.drop() } }
        try await db.client.execute("CREATE TABLE marks (id int PRIMARY KEY CHECK (id > 0))")
        try await db.client.withConnection { connection in
            let before = connection.roundTrips
            let level = try connection.transaction(isolation: .repeatableRead) { connection in
                #expect(connection.isInTransaction)
                return try connection.query("SELECT current_setting('transaction_isolation') AS level").scalar(String.self)
            }
            #expect(level == "repeatable read")
            #expect(connection.roundTrips - before == 2)
            #expect(!connection.isInTransaction)

            #expect(throws: PostgresError.self) {
                try connection.transaction { connection in
                    try connection.query("INSERT INTO marks VALUES ($1)", Int32(-1))
                    try connection.query("INSERT INTO marks VALUES ($1)", Int32(1))
                }
            }
            #expect(!connection.isInTransaction)
            // A body that sends nothing: nothing to roll back, and the connection goes on.
            struct Refused: Error {}
            #expect(throws: Refused.self) { try connection.transaction { _ in throw Refused() } }
            #expect(!connection.isInTransaction)
            try connection.transaction { connection in _ = try connection.execute("INSERT INTO marks VALUES (2)") }
        }
        #expect(try await db.client.query("SELECT id FROM marks ORDER BY id") { try $0.decode(Int32.self, at: 0) } == [2])
    }

    @Test func aCopyGoesAfterTheStatementsHeldBeforeIt() async throws {
        let db = try await TestDatabase.make(migrated: false)
        defer { Task { await db.drop() } }
        try await db.client.execute("CREATE TABLE marks (id int PRIMARY KEY)")
        try await db.client.withConnection { connection in
            try connection.execute("BEGIN")
            connection.executeWithNext("SAVEPOINT before_copy")
            #expect(try connection.copyIn("COPY marks (id) FROM STDIN") { writer in try writer.write(row: ["1"]); try writer.write(row: ["2"]) } == 2)
            // The savepoint was made before the COPY, so rolling back to it undoes the rows.
            try connection.execute("ROLLBACK TO SAVEPOINT before_copy")
            try connection.execute("COMMIT")
        }
        #expect(try await db.client.query("SELECT count(*) FROM marks") { try $0.decode(Int64.self, at: 0) } == [0])
    }

    @Test func aHeldStatementThatFailsFailsTheNextWhichDoesNotRun() async throws {
        let db = try await TestDatabase.make(migrated: false)
        defer { Task { await db.drop() } }
        try await db.client.execute("CREATE TABLE marks (id int PRIMARY KEY)")
        try await db.client.withConnection { connection in
            try connection.execute("BEGIN")
            connection.executeWithNext("RELEASE SAVEPOINT never_made")
            let refused = #expect(throws: PostgresError.self) { try connection.query("INSERT INTO marks VALUES ($1)", Int32(1)) }
            #expect(refused?.description.contains("never_made") == true)
            #expect(connection.isTransactionFailed)
            // A COMMIT of the failed transaction says so in its tag.
            #expect(try connection.execute("COMMIT").commandTag == "ROLLBACK")
            // Asking about the transaction sends what is held: a failing one leaves it failed.
            try connection.execute("BEGIN")
            connection.executeWithNext("RELEASE SAVEPOINT never_made")
            #expect(connection.isTransactionFailed)
            try connection.execute("ROLLBACK")
        }
        #expect(try await db.client.query("SELECT count(*) FROM marks") { try $0.decode(Int64.self, at: 0) } == [0])
    }
}
