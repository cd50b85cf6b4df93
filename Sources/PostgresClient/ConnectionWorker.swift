import Foundation

/// A thread that owns one connection and runs jobs on it one at a time. libpq calls block, so they
/// run here and never on Swift's cooperative thread pool; callers await a continuation instead.
final class ConnectionWorker: @unchecked Sendable {
    typealias Job = @Sendable (ConnectionWorker) -> Void

    // Guarded by `condition`.
    private let condition = NSCondition()
    private var jobs: [Job] = []
    private var stopping = false

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
        // Named from inside: on Linux a name set before start does not reach the thread.
        let thread = Thread { [self] in
            Thread.current.name = name
            runLoop()
        }
        thread.stackSize = 1 << 20
        thread.start()
    }

    /// Queues a job; it runs on the worker thread after the ones before it.
    func submit(_ job: @escaping Job) {
        condition.lock()
        jobs.append(job)
        condition.signal()
        condition.unlock()
    }

    /// Runs `body` with a live connection, opening (or reopening) it first. If the connection broke
    /// during the call, it is dropped so the next call reconnects. Call only from a job, or from the
    /// thread that has this worker checked out of the pool.
    func withLiveConnection<T>(_ body: (PostgresConnection) throws -> T) throws -> T {
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
        condition.lock()
        stopping = true
        condition.signal()
        condition.unlock()
    }

    private func runLoop() {
        while true {
            condition.lock()
            while jobs.isEmpty && !stopping { condition.wait() }
            if jobs.isEmpty && stopping {
                condition.unlock()
                break
            }
            let job = jobs.removeFirst()
            condition.unlock()
            job(self)
        }
        connection?.close()
        connection = nil
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
