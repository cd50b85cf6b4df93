import Foundation
import Synchronization

/// A bounded pool of PostgreSQL connections, each on a thread of its own.
///
/// Guarantees: at most `maximumConnections` sessions are open; a call waits for a free one
/// rather than opening more. Connections open lazily and reopen on the next call after the server
/// went away, so a restart of PostgreSQL costs the calls in flight (they throw a connection error)
/// and nothing else.
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
        var waiters: [CheckedContinuation<ConnectionWorker, any Error>] = []
        var closed = false
    }

    public let configuration: Configuration
    private let state = Mutex(State())

    public init(configuration: Configuration) throws {
        guard configuration.maximumConnections >= 1 else {
            throw PostgresError(.invalidConfiguration, "The pool needs at least one connection, not \(configuration.maximumConnections).")
        }
        self.configuration = configuration
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

    /// Closes idle connections and refuses new calls; calls holding a connection finish first.
    public func close() {
        let (idle, waiters) = state.withLock { state -> ([ConnectionWorker], [CheckedContinuation<ConnectionWorker, any Error>]) in
            state.closed = true
            defer {
                state.idle = []
                state.waiters = []
            }
            return (state.idle, state.waiters)
        }
        idle.forEach { $0.stop() }
        waiters.forEach { $0.resume(throwing: PostgresError(.poolClosed, "The connection pool is closed.")) }
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
            let decision = state.withLock { state -> Acquisition in
                if state.closed { return .closed }
                if let worker = state.idle.popLast() { return .ready(worker) }
                if state.created < configuration.maximumConnections {
                    state.created += 1
                    return .create(number: state.created)
                }
                state.waiters.append(continuation)
                return .wait
            }
            switch decision {
            case .ready(let worker): continuation.resume(returning: worker)
            case .create(let number):
                continuation.resume(
                    returning: ConnectionWorker(
                        configuration: configuration.connection, applicationName: configuration.applicationName,
                        name: "postgres-\(number)"))
            case .wait: break
            case .closed: continuation.resume(throwing: PostgresError(.poolClosed, "The connection pool is closed."))
            }
        }
    }

    private func release(_ worker: ConnectionWorker) {
        let waiter = state.withLock { state -> CheckedContinuation<ConnectionWorker, any Error>? in
            if state.closed { return nil }
            if !state.waiters.isEmpty { return state.waiters.removeFirst() }
            state.idle.append(worker)
            return nil
        }
        if let waiter {
            waiter.resume(returning: worker)
        } else if state.withLock({ $0.closed }) {
            worker.stop()
        }
    }
}
