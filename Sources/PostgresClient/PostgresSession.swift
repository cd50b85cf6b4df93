/// One dedicated session on a thread of its own, outside the pool: for work that must stay on the
/// same backend between calls, such as a session advisory lock held as a lease. After the server
/// went away the next call opens a new session (compare `backendPID` to notice: what the old
/// session held, such as its locks, is gone).
public final class PostgresSession: Sendable {
    private let worker: ConnectionWorker

    public init(configuration: PostgresConfiguration, applicationName: String = "inbox") {
        worker = ConnectionWorker(configuration: configuration, applicationName: applicationName, name: applicationName)
    }

    /// Runs `body` on the session's thread, opening the session first if it is not open.
    public func run<T: Sendable>(_ body: @escaping @Sendable (PostgresConnection) throws -> T) async throws -> T {
        try await worker.run(body)
    }

    /// Ends the session (releasing whatever it holds) once queued calls have run.
    public func close() { worker.stop() }

    /// Ends the session once queued calls have run, and returns when it has ended: a lease it
    /// held is free for another node when this returns.
    public func end() async { await worker.stopAndWait() }

    deinit { worker.stop() }
}
