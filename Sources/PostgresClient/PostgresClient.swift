import Foundation
import Threads

/// A bounded pool of PostgreSQL connections, each on a thread of its own.
///
/// Guarantees: at most `maximumConnections` sessions are open; a call waits for a free one
/// rather than opening more. Connections open lazily and reopen on the next call after the server
/// went away, so a restart of PostgreSQL costs the calls in flight (they throw a connection error)
/// and nothing else; a read that passes `retryIfFoundDead` does not even pay for finding its idle
/// connection dead (it runs again, once, on a fresh one).
public final class PostgresClient: Sendable {
    public struct Configuration: Sendable {
        public var connection: PostgresConfiguration
        public var maximumConnections: Int = 10
        public var applicationName: String = "inbox"

        public init(connection: PostgresConfiguration, maximumConnections: Int = 10, applicationName: String = "inbox") {
            self.connection = connection
            self.maximumConnections = maximumConnections
            self.applicationName = applicationName
        }
    }

    private struct State {
        var idle: [ConnectionWorker] = []
        var created = 0
        var waiters: [Waiter] = []
        var closed = false
    }

    /// A call waiting for a free connection: a task awaiting it, or a thread blocked on it.
    private enum Waiter {
        case task(CheckedContinuation<ConnectionWorker, any Error>)
        case thread(ThreadWaiter)

        func resume(with result: Result<ConnectionWorker, any Error>) {
            switch self {
            case .task(let continuation): continuation.resume(with: result)
            case .thread(let waiter): waiter.resume(with: result)
            }
        }
    }

    /// A blocked thread's side of the hand-over: the pool stores the result and signals.
    private final class ThreadWaiter: Sendable {
        private let semaphore = DispatchSemaphore(value: 0)
        private let result = Locked<Result<ConnectionWorker, any Error>?>(nil)

        func resume(with result: Result<ConnectionWorker, any Error>) {
            self.result.withLock { $0 = result }
            semaphore.signal()
        }

        func wait() throws -> ConnectionWorker {
            semaphore.wait()
            return try result.withLock { $0! }.get()
        }
    }

    public let configuration: Configuration
    private let state = Locked(State())

    public init(configuration: Configuration) throws {
        guard configuration.maximumConnections >= 1 else {
            throw PostgresError(.invalidConfiguration, "The pool needs at least one connection, not \(configuration.maximumConnections).")
        }
        self.configuration = configuration
    }

    private init(checked configuration: Configuration) {
        self.configuration = configuration
    }

    /// Another pool of this one's size on the same database, whose sessions carry `applicationName`
    /// (a pool's configuration is valid once it exists, so this cannot fail). Close it when done.
    public func separatePool(applicationName: String) -> PostgresClient {
        var configuration = self.configuration
        configuration.applicationName = applicationName
        return PostgresClient(checked: configuration)
    }

    public convenience init(url: String, maximumConnections: Int = 10) throws {
        try self.init(configuration: Configuration(connection: PostgresConfiguration(url: url), maximumConnections: maximumConnections))
    }

    /// Runs `body` on a pooled connection, on that connection's thread. Keep it short: the connection
    /// is not free for others until it returns.
    public func withConnection<T: Sendable>(_ body: @escaping @Sendable (PostgresConnection) throws -> T) async throws -> T {
        let worker = try await acquire()
        defer { release(worker) }
        return try await worker.run(body)
    }

    /// Runs `body` on a pooled connection on the calling thread, which waits (blocked) for a free
    /// connection first. For threads that may block, such as an HTTP server's workers: it saves the
    /// two thread hops of `withConnection`. Never call it from Swift's cooperative pool.
    ///
    /// `retryIfFoundDead`: when the pooled connection turns out dead (the server ended the session
    /// while it was idle, as after a database failover or `pg_terminate_backend`), run `body` once
    /// more on a fresh connection instead of throwing the connection error. Pass it only for a
    /// `body` that is safe to run twice (reads that write nothing, such as a GET's); never for one
    /// that writes, which may have committed before the connection broke. A connection that was
    /// opened for this call, or any other error (a statement timeout), is not retried.
    public func withConnectionBlocking<T>(retryIfFoundDead: Bool = false, _ body: (PostgresConnection) throws -> T) throws -> T {
        let worker = try acquireBlocking()
        defer { release(worker) }
        // The worker's thread leaves a checked-out connection alone, so this thread may use it.
        return try worker.withLiveConnection(retryingIfFoundDead: retryIfFoundDead, body)
    }

    /// Runs `body` in a transaction on a pooled connection on the calling thread (see `withConnectionBlocking`).
    public func transactionBlocking<T>(isolation: TransactionIsolation = .readCommitted, _ body: (PostgresConnection) throws -> T) throws -> T {
        try withConnectionBlocking { connection in try connection.transaction(isolation: isolation, body) }
    }

    /// Runs one statement on a pooled connection on the calling thread (see `withConnectionBlocking`,
    /// also for `retryIfFoundDead`, which only a statement that writes nothing may pass).
    public func queryBlocking<T>(
        _ sql: String, binds: [PostgresBind] = [], retryIfFoundDead: Bool = false, _ transform: (PostgresRow) throws -> T
    ) throws -> [T] {
        try withConnectionBlocking(retryIfFoundDead: retryIfFoundDead) { connection in try connection.query(sql, binds: binds).map(transform) }
    }

    /// Runs `body` in a transaction on a pooled connection: committed when it returns, rolled back when it throws.
    public func transaction<T: Sendable>(
        isolation: TransactionIsolation = .readCommitted, _ body: @escaping @Sendable (PostgresConnection) throws -> T
    ) async throws -> T {
        try await withConnection { connection in try connection.transaction(isolation: isolation, body) }
    }

    /// Runs one statement on a pooled connection and decodes its rows with `transform`.
    public func query<T: Sendable>(
        _ sql: String, binds: [PostgresBind] = [], _ transform: @escaping @Sendable (PostgresRow) throws -> T
    ) async throws -> [T] {
        try await withConnection { connection in try connection.query(sql, binds: binds).map(transform) }
    }

    /// Runs one statement on a pooled connection, ignoring its rows.
    public func execute(_ sql: String, binds: [PostgresBind] = []) async throws {
        try await withConnection { connection in _ = try connection.query(sql, binds: binds) }
    }

    /// The pool now: connections open (in use or idle), idle, calls waiting for one, and the most
    /// it opens.
    public struct Statistics: Sendable, Hashable {
        public var open: Int
        public var idle: Int
        public var waiting: Int
        public var maximum: Int
    }

    public var statistics: Statistics {
        state.withLock { state in
            Statistics(open: state.created, idle: state.idle.count, waiting: state.waiters.count, maximum: configuration.maximumConnections)
        }
    }

    /// Closes idle connections and refuses new calls; calls holding a connection finish first.
    public func close() {
        let (idle, waiters) = state.withLock { state -> ([ConnectionWorker], [Waiter]) in
            state.closed = true
            defer {
                state.idle = []
                state.waiters = []
            }
            return (state.idle, state.waiters)
        }
        idle.forEach { $0.stop() }
        waiters.forEach { $0.resume(with: .failure(PostgresError(.poolClosed, "The connection pool is closed."))) }
    }

    deinit {
        state.withLock { state in state.idle.forEach { $0.stop() } }
    }

    private enum Acquisition {
        case ready(ConnectionWorker)
        case create(number: Int)
        case wait
        case closed
    }

    private func acquire() async throws -> ConnectionWorker {
        try await withCheckedThrowingContinuation { continuation in
            let waiter = Waiter.task(continuation)
            if let result = acquire(or: waiter) { waiter.resume(with: result) }
        }
    }

    private func acquireBlocking() throws -> ConnectionWorker {
        let waiter = ThreadWaiter()
        if let result = acquire(or: .thread(waiter)) { return try result.get() }
        return try waiter.wait()
    }

    /// A connection now (idle or new), the pool's refusal, or nil when `waiter` was queued for the
    /// next connection released.
    private func acquire(or waiter: Waiter) -> Result<ConnectionWorker, any Error>? {
        let decision = state.withLock { state -> Acquisition in
            if state.closed { return .closed }
            if let worker = state.idle.popLast() { return .ready(worker) }
            if state.created < configuration.maximumConnections {
                state.created += 1
                return .create(number: state.created)
            }
            state.waiters.append(waiter)
            return .wait
        }
        switch decision {
        case .ready(let worker): return .success(worker)
        case .create(let number):
            return .success(
                ConnectionWorker(
                    configuration: configuration.connection, applicationName: configuration.applicationName, name: "postgres-\(number)"))
        case .wait: return nil
        case .closed: return .failure(PostgresError(.poolClosed, "The connection pool is closed."))
        }
    }

    private func release(_ worker: ConnectionWorker) {
        let waiter = state.withLock { state -> Waiter? in
            if state.closed { return nil }
            if !state.waiters.isEmpty { return state.waiters.removeFirst() }
            state.idle.append(worker)
            return nil
        }
        if let waiter {
            waiter.resume(with: .success(worker))
        } else if state.withLock({ $0.closed }) {
            worker.stop()
        }
    }
}
