import Foundation
import HTTPTesting
import InboxTesting
import PostgresClient
import Testing

/// Sessions that keep their statements prepared (`withPreparedStatements`), as the API's pool does.
@Suite struct PreparedStatementTests {
    /// The statements this session has prepared, as the server lists them.
    static func prepared(on connection: PostgresConnection) throws -> [String] {
        try connection.query("SELECT statement FROM pg_prepared_statements ORDER BY statement").map { try $0.decode(String.self, "statement") }
    }

    @Test func aStatementIsPreparedOnceAndRunByNameAfterwards() async throws {
        let db = try await TestDatabase.make(migrated: false)
        defer { Task { await db.drop() } }
        let connection = try PostgresConnection(configuration: db.configuration.withPreparedStatements(8))
        defer { connection.close() }
        try connection.execute("CREATE TABLE bell (person text, n int)")
        for n in 1...5 { try connection.query("INSERT INTO bell VALUES ($1, $2)", "p1", Int32(n)) }
        let sum = try connection.query("SELECT sum(n)::bigint FROM bell WHERE person = $1", "p1").scalar(Int64.self)
        #expect(sum == 15)
        // One INSERT and one SELECT, each prepared once; the catalogue query itself is a third.
        let statements = try Self.prepared(on: connection)
        #expect(statements.count == 3)
        #expect(statements.filter { $0.hasPrefix("INSERT INTO bell") }.count == 1)
        // In a pipeline too, and a prepared statement outlives a rolled-back transaction.
        struct Refused: Error {}
        #expect(throws: Refused.self) {
            try connection.transaction { connection in
                _ = try connection.query("INSERT INTO bell VALUES ($1, $2)", "p2", Int32(7))
                throw Refused()
            }
        }
        let results = try connection.pipeline([
            PostgresStatement("INSERT INTO bell VALUES ($1, $2)", "p2", Int32(10)),
            PostgresStatement("SELECT sum(n)::bigint FROM bell WHERE person = $1", "p2"),
        ])
        #expect(try results[1].scalar(Int64.self) == 10)
        #expect(try Self.prepared(on: connection).count == 3)
    }

    @Test func pastItsCapacityASessionRunsStatementsUnprepared() async throws {
        let db = try await TestDatabase.make(migrated: false)
        defer { Task { await db.drop() } }
        let connection = try PostgresConnection(configuration: db.configuration.withPreparedStatements(2))
        defer { connection.close() }
        for n in 1...6 { #expect(try connection.query("SELECT $1::int + \(n)", Int32(1)).scalar(Int32.self) == Int32(1 + n)) }
        #expect(try Self.prepared(on: connection).count == 2)
        // Without the setting nothing is prepared.
        let plain = try PostgresConnection(configuration: db.configuration)
        defer { plain.close() }
        for _ in 1...3 { _ = try plain.query("SELECT $1::int", Int32(1)) }
        #expect(try Self.prepared(on: plain).isEmpty)
    }

    /// A statement PostgreSQL refuses throws the server's error when it is prepared, as it would
    /// have when run, and the session goes on.
    @Test func aRefusedStatementThrowsItsErrorAndTheSessionGoesOn() async throws {
        let db = try await TestDatabase.make(migrated: false)
        defer { Task { await db.drop() } }
        let connection = try PostgresConnection(configuration: db.configuration.withPreparedStatements(8))
        defer { connection.close() }
        let error = #expect(throws: PostgresError.self) { try connection.query("SELECT * FROM no_such_table WHERE id = $1", Int32(1)) }
        #expect(error?.sqlState == .undefinedTable)
        #expect(try connection.query("SELECT $1::int", Int32(4)).scalar(Int32.self) == 4)
    }

    /// A table swapped for one of another shape (a column added by a migration, a replay of a new
    /// projection version): PostgreSQL refuses the old prepared statement (0A000). Outside a
    /// transaction the statement is prepared afresh and run at once; in one, the refusal stands
    /// (the transaction is aborted) and the next call prepares it afresh. A swap that keeps the
    /// shape is re-planned by the server without a word.
    @Test func aTableOfAnotherShapeIsPreparedAfresh() async throws {
        let db = try await TestDatabase.make(migrated: false)
        defer { Task { await db.drop() } }
        let connection = try PostgresConnection(configuration: db.configuration.withPreparedStatements(8))
        defer { connection.close() }
        let admin = try db.connect()
        defer { admin.close() }
        try admin.execute("CREATE TABLE entries (id int); INSERT INTO entries VALUES (1)")
        #expect(try connection.query("SELECT * FROM entries WHERE id > $1", Int32(0)).count == 1)
        try admin.execute("BEGIN; ALTER TABLE entries RENAME TO old_entries; CREATE TABLE entries (id int); INSERT INTO entries VALUES (1), (2); COMMIT")
        #expect(try connection.query("SELECT * FROM entries WHERE id > $1", Int32(0)).count == 2)
        try admin.execute("ALTER TABLE entries ADD COLUMN title text")
        let rows = try connection.query("SELECT * FROM entries WHERE id > $1", Int32(0))
        #expect(rows.columnNames == ["id", "title"])
        #expect(rows.count == 2)
        try admin.execute("ALTER TABLE entries ADD COLUMN read boolean")
        let refused = #expect(throws: PostgresError.self) {
            try connection.transaction { connection in _ = try connection.query("SELECT * FROM entries WHERE id > $1", Int32(0)) }
        }
        #expect(refused?.sqlState == .featureNotSupported)
        // Forgotten, so a loop that meets it tries again (and succeeds), as after a lost connection.
        #expect(refused?.preparedStatementForgotten == true && refused?.isTransient == true)
        let again = try connection.transaction { connection in try connection.query("SELECT * FROM entries WHERE id > $1", Int32(0)) }
        #expect(again.columnNames == ["id", "title", "read"])
    }
}

/// `withConnectionBlocking`: a thread that may block (an HTTP worker) uses a pooled connection
/// itself, waiting for one when all are taken, beside tasks that await theirs.
@Suite struct BlockingPoolTests {
    @Test func aThreadWaitsForAFreeConnectionAndTasksAndThreadsShareThePool() async throws {
        let db = try await TestDatabase.make(migrated: false, poolSize: 2)
        defer { Task { await db.drop() } }
        try await db.client.execute("CREATE TABLE hits (n int)")
        let threads = 6
        let perThread = 20
        let done = DispatchGroup()
        let failures = Failures()
        for thread in 0..<threads {
            done.enter()
            Thread {
                defer { done.leave() }
                do {
                    for n in 0..<perThread {
                        try db.client.withConnectionBlocking { connection in
                            _ = try connection.query("INSERT INTO hits VALUES ($1)", Int32(thread * 1000 + n))
                        }
                    }
                } catch { failures.add(error) }
            }.start()
        }
        // Tasks take their turns meanwhile.
        for n in 0..<40 { try await db.client.execute("INSERT INTO hits VALUES ($1)", binds: [PostgresBind(Int32(-1 - n))]) }
        await withCheckedContinuation { continuation in done.notify(queue: .global()) { continuation.resume() } }
        #expect(failures.all.isEmpty)
        let count = try await db.client.query("SELECT count(*) FROM hits") { try $0.decode(Int64.self, "count") }.first
        #expect(count == Int64(threads * perThread + 40))
        // Never more sessions than the pool's size.
        let sessions = try await db.client.query(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() AND application_name = 'inbox'"
        ) { try $0.decode(Int64.self, "count") }.first ?? 0
        #expect(sessions <= 1)
    }

    /// The pool's one connection is held; a thread that asks for one waits (or, if it comes only
    /// after the close, is refused at once): either way it is told the pool closed.
    @Test func aBlockedThreadIsToldWhenThePoolCloses() async throws {
        let db = try await TestDatabase.make(migrated: false)
        defer { Task { await db.drop() } }
        let pool = try PostgresClient(configuration: .init(connection: db.configuration, maximumConnections: 1))
        // The holder on a thread of its own, waited for rather than slept for, holding the
        // connection until the pool has closed: on a loaded machine a holder started as a task
        // took its connection late (the cooperative pool was busy), and the thread below got it
        // instead (the failure seen once under make test).
        let held = DispatchSemaphore(value: 0)
        let closed = DispatchSemaphore(value: 0)
        let holderDone = DispatchSemaphore(value: 0)
        Thread {
            try? pool.withConnectionBlocking { _ in
                held.signal()
                _ = closed.wait(timeout: .now() + 60)
            }
            holderDone.signal()
        }.start()
        #expect(try await held.signalled(within: .seconds(30)), "the holder never took the connection")
        let failures = Failures()
        let finished = DispatchSemaphore(value: 0)
        Thread {
            do { try pool.withConnectionBlocking { _ = try $0.query("SELECT 1") } } catch { failures.add(error) }
            finished.signal()
        }.start()
        try await Task.sleep(for: .milliseconds(100))
        pool.close()
        closed.signal()
        #expect(try await holderDone.signalled(within: .seconds(30)))
        #expect(try await finished.signalled(within: .seconds(30)))
        #expect((failures.all.first as? PostgresError)?.code == .poolClosed)
    }
}

/// A read on a pooled connection the server ended while it sat idle (a failover, a restart,
/// `pg_terminate_backend`) runs once more on a fresh connection when it says it may; nothing else
/// is retried.
@Suite struct DeadConnectionRetryTests {
    /// Terminates the pool's one session (application `inbox`) and waits until it is gone.
    static func terminateSessions(of db: TestDatabase, pool: PostgresClient) async throws {
        let pid = try await pool.withConnection { connection in connection.backendPID }
        _ = try await db.client.query("SELECT pg_terminate_backend($1)", binds: [PostgresBind(pid)]) { _ in 0 }
        for _ in 0..<100 {
            let alive = try await db.client.query("SELECT count(*) FROM pg_stat_activity WHERE pid = $1", binds: [PostgresBind(pid)]) {
                try $0.decode(Int64.self, "count")
            }.first ?? 0
            if alive == 0 { return }
            try await Task.sleep(for: .milliseconds(20))
        }
    }

    @Test func aReadOnAConnectionFoundDeadRunsOnceMoreOnAFreshOne() async throws {
        let db = try await TestDatabase.make(migrated: false)
        defer { Task { await db.drop() } }
        let pool = try PostgresClient(configuration: .init(connection: db.configuration, maximumConnections: 1))
        defer { pool.close() }
        try await Self.terminateSessions(of: db, pool: pool)
        let runs = Failures()
        let value = try await BlockingThread.run {
            try pool.withConnectionBlocking(retryIfFoundDead: true) { connection in
                runs.add(CancellationError())
                return try connection.query("SELECT 42").scalar(Int32.self)
            }
        }
        #expect(value == 42)
        #expect(runs.all.count == 2)

        // Without the promise that the body may run twice, the dead connection's error is thrown.
        try await Self.terminateSessions(of: db, pool: pool)
        let error = await #expect(throws: PostgresError.self) {
            try await BlockingThread.run { try pool.queryBlocking("SELECT 1") { try $0.decode(Int32.self, at: 0) } }
        }
        #expect(error?.isConnectionError == true)
        // And the connection after it is fresh again.
        #expect(try await BlockingThread.run { try pool.queryBlocking("SELECT 1", retryIfFoundDead: true) { try $0.decode(Int32.self, at: 0) } } == [1])
    }

    /// Every session opens in UTC with ISO dates and without JIT compilation (a generic plan on a
    /// long log passed `jit_above_cost` and was compiled at every execution).
    @Test func everySessionOpensInUTCWithoutJIT() async throws {
        let db = try await TestDatabase.make(migrated: false)
        defer { Task { await db.drop() } }
        let pool = try PostgresClient(configuration: .init(connection: db.configuration, maximumConnections: 1))
        defer { pool.close() }
        let settings = try await pool.query("SELECT current_setting('TimeZone') || ' ' || current_setting('DateStyle') || ' ' || current_setting('jit')") {
            try $0.decode(String.self, at: 0)
        }
        #expect(settings == ["UTC ISO, YMD off"])
        // With every cost above the threshold, nothing is compiled.
        let plan = try await pool.withConnection { connection in
            try connection.execute("SET jit_above_cost = 0")
            return try connection.query("EXPLAIN (ANALYZE, FORMAT TEXT) SELECT sum(x) FROM generate_series(1, 1000) x").map { try $0.decode(String.self, at: 0) }
        }
        #expect(!plan.isEmpty && !plan.contains { $0.contains("JIT") }, "\(plan)")
    }

    @Test func aStatementTimeoutIsNeverRetried() async throws {
        let db = try await TestDatabase.make(migrated: false)
        defer { Task { await db.drop() } }
        let pool = try PostgresClient(
            configuration: .init(connection: db.configuration.withStatementTimeout(.milliseconds(100)), maximumConnections: 1))
        defer { pool.close() }
        let runs = Failures()
        let error = await #expect(throws: PostgresError.self) {
            try await BlockingThread.run {
                try pool.withConnectionBlocking(retryIfFoundDead: true) { connection in
                    runs.add(CancellationError())
                    _ = try connection.query("SELECT pg_sleep(2)")
                }
            }
        }
        #expect(error?.sqlState == .queryCanceled)
        #expect(runs.all.count == 1)
    }
}

final class Failures: @unchecked Sendable {
    private let lock = NSLock()
    private var errors: [any Error] = []
    func add(_ error: any Error) { lock.withLock { errors.append(error) } }
    var all: [any Error] { lock.withLock { errors } }
}
