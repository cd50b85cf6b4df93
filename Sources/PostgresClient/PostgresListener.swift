#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A dedicated session that LISTENs on channels and hands out notifications. It reconnects and
/// listens again after the server went away; a wake-up after a reconnect carries no notification,
/// so a subscriber re-reads (notifications sent while it was gone are lost, events are not).
///
/// A wait is cut short when its task is cancelled: a stopping service does not wait out its
/// poll interval.
public final class PostgresListener: Sendable {
    private let worker: ConnectionWorker
    private let interrupt: InterruptPipe
    public let channels: [String]

    public init(configuration: PostgresConfiguration, channels: [String], applicationName: String = "inbox-listener") throws {
        for channel in channels { _ = try PostgresConnection.checkedIdentifier(channel) }
        self.channels = channels
        interrupt = try InterruptPipe()
        worker = ConnectionWorker(
            configuration: configuration, applicationName: applicationName, name: "postgres-listener",
            onConnect: { connection in for channel in channels { try connection.listen(channel) } })
    }

    /// Waits up to `timeout` for notifications; returns what arrived (possibly nothing). Throws a
    /// connection error when the server cannot be reached (the next call tries again), and
    /// `CancellationError` when the task was cancelled before or during the wait.
    public func next(timeout: Duration) async throws -> [PostgresNotification] {
        try Task.checkCancellation()
        let interrupt = self.interrupt
        let received = try await withTaskCancellationHandler {
            try await worker.run { connection in try connection.waitForNotifications(timeout: timeout, interrupt: interrupt.readEnd) }
        } onCancel: {
            interrupt.signal()
        }
        try Task.checkCancellation()
        return received
    }

    /// Opens the session and starts listening now, so that nothing sent after this returns is missed.
    public func start() async throws {
        try await worker.run { _ in () }
    }

    /// The backend of the listening session (opening it if needed): for tests that end it.
    public func backendPID() async throws -> Int32 {
        try await worker.run { connection in connection.backendPID }
    }

    deinit { worker.stop() }
}

/// A pipe whose write end wakes a `poll` on its read end. A byte written after the wait already
/// returned wakes the next wait early once, which costs a re-read and nothing else.
final class InterruptPipe: Sendable {
    let readEnd: Int32
    private let writeEnd: Int32

    init() throws {
        var ends: [Int32] = [0, 0]
        guard pipe(&ends) == 0 else {
            throw PostgresError(.clientFailure, "could not make a pipe: \(String(cString: strerror(errno)))")
        }
        for end in ends {
            _ = fcntl(end, F_SETFL, fcntl(end, F_GETFL) | O_NONBLOCK)
            _ = fcntl(end, F_SETFD, FD_CLOEXEC)
        }
        readEnd = ends[0]
        writeEnd = ends[1]
    }

    func signal() {
        var byte: UInt8 = 1
        _ = write(writeEnd, &byte, 1)
    }

    deinit {
        close(readEnd)
        close(writeEnd)
    }
}
