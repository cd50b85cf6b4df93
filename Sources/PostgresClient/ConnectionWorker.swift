import Foundation
import Threads

/// A thread that owns one connection and runs jobs on it one at a time. libpq calls block, so they
/// run here and never on Swift's cooperative thread pool; callers await a continuation instead.
final class ConnectionWorker: @unchecked Sendable {
    typealias Job = @Sendable (ConnectionWorker) -> Void

    /// The worker's one thread.
    private let thread: BlockingPool

    // Touched by one thread at a time: the worker's own, or the thread that has the worker checked
    // out of the pool (`PostgresClient.withConnectionBlocking`); the pool's lock orders the two.
    private var connection: PostgresConnection?
    private let configuration: PostgresConfiguration
    private let applicationName: String
    private let onConnect: (@Sendable (PostgresConnection) throws -> Void)?

    init(
        configuration: PostgresConfiguration, applicationName: String, name: String,
        onConnect: (@Sendable (PostgresConnection) throws -> Void)? = nil
    ) {
        self.configuration = configuration
        self.applicationName = applicationName
        self.onConnect = onConnect
        thread = BlockingPool(threads: 1, name: name)
    }

    /// Queues a job; it runs on the worker thread after the ones before it.
    func submit(_ job: @escaping Job) {
        thread.submit { [self] in job(self) }
    }

    /// Runs `body` with a live connection, opening (or reopening) it first. If the connection broke
    /// during the call, it is dropped so the next call reconnects. Call only from a job, or from the
    /// thread that has this worker checked out of the pool.
    ///
    /// With `retryingIfFoundDead`, a connection kept from an earlier call that turns out dead (the
    /// server ended the session while it sat in the pool: a connection error) gets `body` run once
    /// more, on a fresh connection. Only for a `body` that is safe to run twice: reads, outside a
    /// transaction that wrote. A fresh connection that fails, or any other error (a statement
    /// timeout is one), is thrown as it is.
    func withLiveConnection<T>(retryingIfFoundDead: Bool = false, _ body: (PostgresConnection) throws -> T) throws -> T {
        let kept = connection?.isOpen == true
        do {
            return try withLiveConnectionOnce(body)
        } catch let error as PostgresError where retryingIfFoundDead && kept && error.isConnectionError {
            return try withLiveConnectionOnce(body)
        }
    }

    private func withLiveConnectionOnce<T>(_ body: (PostgresConnection) throws -> T) throws -> T {
        let live: PostgresConnection
        if let connection, connection.isOpen {
            live = connection
        } else {
            connection?.close()
            connection = nil
            let fresh = try PostgresConnection(configuration: configuration, applicationName: applicationName)
            try onConnect?(fresh)
            connection = fresh
            live = fresh
        }
        defer {
            if !live.isOpen {
                live.close()
                connection = nil
            } else if live.isInTransaction {
                // A body must not leave a transaction open for the next borrower.
                if (try? live.execute("ROLLBACK")) == nil { live.close(); connection = nil }
            }
        }
        do {
            return try body(live)
        } catch let error as PostgresError where error.isConnectionError {
            live.close()
            connection = nil
            throw error
        }
    }

    /// Finishes queued jobs, closes the connection and ends the thread.
    func stop() {
        thread.submit { [self] in
            connection?.close()
            connection = nil
        }
        thread.stop()
    }

    /// Like `stop()`, and returns once the connection is closed. Its advisory locks are released
    /// first, while it is still open: the server frees a closed session's locks only when it gets
    /// round to it, and whoever waits for the lock should not have to guess when.
    func stopAndWait() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            thread.submit { [self] in
                if let connection, connection.isOpen { _ = try? connection.execute("SELECT pg_advisory_unlock_all()") }
                connection?.close()
                connection = nil
                continuation.resume()
            }
            thread.stop()
        }
    }

    /// Runs `body` on the worker thread with a live connection and awaits its result.
    func run<T: Sendable>(_ body: @escaping @Sendable (PostgresConnection) throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, any Error>) in
            submit { worker in
                continuation.resume(with: Result { try worker.withLiveConnection(body) })
            }
        }
    }
}
