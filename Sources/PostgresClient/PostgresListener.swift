/// A dedicated session that LISTENs on channels and hands out notifications. It reconnects and
/// listens again after the server went away; a wake-up after a reconnect carries no notification,
/// so a subscriber re-reads (notifications sent while it was gone are lost, events are not).
public final class PostgresListener: Sendable {
    private let worker: ConnectionWorker
    public let channels: [String]

    public init(configuration: PostgresConfiguration, channels: [String], applicationName: String = "inbox-listener") throws {
        for channel in channels { _ = try PostgresConnection.checkedIdentifier(channel) }
        self.channels = channels
        worker = ConnectionWorker(
            configuration: configuration, applicationName: applicationName, name: "postgres-listener",
            onConnect: { connection in for channel in channels { try connection.listen(channel) } })
    }

    /// Waits up to `timeout` for notifications; returns what arrived (possibly nothing).
    /// Throws a connection error when the server cannot be reached; the next call tries again.
    public func next(timeout: Duration) async throws -> [PostgresNotification] {
        try await worker.run { connection in try connection.waitForNotifications(timeout: timeout) }
    }

    /// Opens the session and starts listening now, so that nothing sent after this returns is missed.
    public func start() async throws {
        try await worker.run { _ in () }
    }

    deinit { worker.stop() }
}
