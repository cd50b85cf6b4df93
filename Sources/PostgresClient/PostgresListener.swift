#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif
import Foundation
import Synchronization

/// A dedicated session that LISTENs on channels and hands out notifications. It reconnects and
/// listens again after the server went away; a wake-up after a reconnect carries no notification,
/// so a subscriber re-reads (notifications sent while it was gone are lost, events are not).
///
/// The session is read all the time, not only while somebody waits in `next`: from `start` (or
/// the first `next`) on, its thread drains what the server sends and keeps it for the next call
/// (each channel and payload once, in the order they first came: what a subscriber acts on).
/// A listener left unread makes its server session block writing to it (`ClientWrite`), and
/// PostgreSQL keeps every notification of the database in its queue until the slowest listening
/// session has read it: the queue grows for as long as that lasts, and a full one fails every
/// commit that notifies (seen: the bell's and the threads' projector listeners blocked through
/// whole benchmark rounds while their projectors applied, the queue growing, docs/benchmarks.md,
/// issue 12's tenth session). While nobody waits, the thread drains at most
/// every `unwatchedDrainInterval`, so a busy subscriber costs a wake-up per interval, not one per
/// notification. Past `keptNotifications` different ones unread, it stops reading until the next
/// call (the server holds the rest, as it would without the thread): nothing is dropped.
///
/// A wait is cut short when its task is cancelled: a stopping service does not wait out its
/// poll interval.
public final class PostgresListener: Sendable {
    private let core: ListenerCore
    public let channels: [String]

    /// How long the thread pauses after draining when nobody was waiting.
    public static let unwatchedDrainInterval = Duration.milliseconds(10)
    /// The most different notifications kept for the next call; past it, the thread stops reading
    /// until that call.
    public static let keptNotifications = 10_000

    public init(configuration: PostgresConfiguration, channels: [String], applicationName: String = "inbox-listener") throws {
        for channel in channels { _ = try PostgresConnection.checkedIdentifier(channel) }
        self.channels = channels
        core = ListenerCore(
            worker: ConnectionWorker(
                configuration: configuration, applicationName: applicationName, name: "postgres-listener",
                onConnect: { connection in for channel in channels { try connection.listen(channel) } }),
            interrupt: try InterruptPipe())
    }

    /// Waits up to `timeout` for notifications; returns what arrived since the last call
    /// (possibly nothing). Throws a connection error when the server cannot be reached (the next
    /// call tries again), and `CancellationError` when the task was cancelled before or during the wait.
    public func next(timeout: Duration) async throws -> [PostgresNotification] {
        try Task.checkCancellation()
        let core = self.core
        let id = core.newWaitID()
        let received = try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<[PostgresNotification], any Error>) in
                core.wait(id, until: .now + timeout, continuation)
            }
        } onCancel: {
            core.end(id, with: .failure(CancellationError()))
        }
        try Task.checkCancellation()
        return received
    }

    /// Opens the session and starts listening now, so that nothing sent after this returns is missed.
    public func start() async throws {
        try await core.runPromptly { _ in () }
        core.startDraining()
    }

    /// The backend of the listening session (opening it if needed): for tests that end it.
    public func backendPID() async throws -> Int32 {
        try await core.runPromptly { connection in connection.backendPID }
    }

    deinit { core.stop() }
}

/// The listener's state, shared with the jobs of its thread (which must not keep the listener
/// itself alive).
final class ListenerCore: Sendable {
    let worker: ConnectionWorker
    let interrupt: InterruptPipe

    private struct Key: Hashable {
        let channel: String
        let payload: String
    }

    private struct State: ~Copyable {
        var kept: [PostgresNotification] = []
        var keys: Set<Key> = []
        /// A wake-up with nothing to hand out: after a reconnect.
        var woken = false
        /// What the last drain failed with; thrown by the next call, which then drains again.
        var failure: (any Error)?
        var waiter: (id: Int, continuation: CheckedContinuation<[PostgresNotification], any Error>, deadline: ContinuousClock.Instant)?
        /// When the thread's current wait for the server ends by itself.
        var turnEnds: ContinuousClock.Instant?
        var nextID = 0
        var draining = false
        var stopped = false
        /// The drain failed: the next drain that connects is a reconnect.
        var lost = false

        mutating func handOut() -> [PostgresNotification] {
            defer {
                kept = []
                keys = []
                woken = false
            }
            return kept
        }
    }
    private let state = Mutex(State())

    func runPromptly<T: Sendable>(_ body: @escaping @Sendable (PostgresConnection) throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, any Error>) in
            worker.submit { worker in continuation.resume(with: Result { try worker.withLiveConnection(body) }) }
            // The drain's wait gives way to it.
            interrupt.signal()
        }
    }

    init(worker: ConnectionWorker, interrupt: InterruptPipe) {
        self.worker = worker
        self.interrupt = interrupt
    }

    func newWaitID() -> Int {
        state.withLock { state in
            state.nextID += 1
            return state.nextID
        }
    }

    /// Registers `continuation` as the waiter until `deadline` (the thread answers it then, with
    /// nothing), or resumes it at once with what is kept (or the failure to throw).
    func wait(_ id: Int, until deadline: ContinuousClock.Instant, _ continuation: CheckedContinuation<[PostgresNotification], any Error>) {
        enum Now {
            case waits, answer([PostgresNotification]), failure(any Error)
        }
        let (now, previous, start, sooner) = state.withLock { state -> (Now, CheckedContinuation<[PostgresNotification], any Error>?, Bool, Bool) in
            // Cancelled before it got here (this runs on the waiting task, and a cancellation sets
            // the task's flag before its handler takes the lock in `end`): answered at once, and
            // the caller then throws.
            if Task.isCancelled { return (.answer([]), nil, false, false) }
            if let failure = state.failure {
                state.failure = nil
                return (.failure(failure), nil, false, false)
            }
            let start = !state.draining && !state.stopped
            if start { state.draining = true }
            if !state.kept.isEmpty || state.woken {
                return (.answer(state.handOut()), nil, start, false)
            }
            let previous = state.waiter?.continuation
            state.waiter = (id, continuation, deadline)
            // The thread's wait would outlast this one's, or it pauses after a drain nobody
            // waited for: it is told to look again now.
            let sooner = !start && state.draining && (state.turnEnds.map { deadline < $0 } ?? true)
            return (.waits, previous, start, sooner)
        }
        // One waiter at a time (the subscriber's loop); one left over from a call whose task went
        // on without it is answered now.
        previous?.resume(returning: [])
        if start { drain() }
        if sooner { interrupt.signal() }
        switch now {
        case .waits: break
        case .answer(let kept): continuation.resume(returning: kept)
        case .failure(let error): continuation.resume(throwing: error)
        }
    }

    /// Ends the wait `id` (if still waiting) with `result`: its cancellation.
    func end(_ id: Int, with result: Result<[PostgresNotification], any Error>) {
        let waiter = state.withLock { state -> CheckedContinuation<[PostgresNotification], any Error>? in
            guard let waiter = state.waiter, waiter.id == id else { return nil }
            state.waiter = nil
            return waiter.continuation
        }
        waiter?.resume(with: result)
    }

    func startDraining() {
        let start = state.withLock { state in
            let start = !state.draining && !state.stopped
            if start { state.draining = true }
            return start
        }
        if start { drain() }
    }

    /// One turn of the thread's drain: waits for what the server sends (up to a second, or the
    /// waiter's deadline, or the interrupt, which lets the thread's other jobs go first), keeps it
    /// or hands it to the waiter, answers a waiter whose time is up, and queues the next turn. A
    /// failure stops the drain until the next call.
    private func drain() {
        worker.submit { [self] worker in
            let ends = state.withLock { state in
                let ends = min(ContinuousClock.now + .seconds(1), state.waiter?.deadline ?? .now + .seconds(1))
                state.turnEnds = ends
                return ends
            }
            let outcome = Result {
                try worker.withLiveConnection { connection in
                    try connection.waitForNotifications(timeout: max(.zero, ends - .now), interrupt: interrupt.readEnd)
                }
            }
            let (waiter, answer, again, pause) = state.withLock {
                state -> (CheckedContinuation<[PostgresNotification], any Error>?, Result<[PostgresNotification], any Error>, Bool, Bool) in
                switch outcome {
                case .success(let received):
                    if state.lost {
                        state.lost = false
                        state.woken = true
                    }
                    for notification in received
                    where state.keys.insert(Key(channel: notification.channel, payload: notification.payload)).inserted {
                        state.kept.append(notification)
                    }
                    state.turnEnds = nil
                    guard !state.kept.isEmpty || state.woken else {
                        if state.stopped { state.draining = false }
                        if let waiter = state.waiter, waiter.deadline <= .now {
                            state.waiter = nil
                            return (waiter.continuation, .success([]), !state.stopped, false)
                        }
                        return (nil, .success([]), !state.stopped, false)
                    }
                    guard let waiter = state.waiter else {
                        // Full: the next call starts the thread reading again.
                        let again = !state.stopped && state.kept.count < PostgresListener.keptNotifications
                        if !again { state.draining = false }
                        return (nil, .success([]), again, !received.isEmpty)
                    }
                    state.waiter = nil
                    if state.stopped { state.draining = false }
                    return (waiter.continuation, .success(state.handOut()), !state.stopped, false)
                case .failure(let error):
                    state.turnEnds = nil
                    state.draining = false
                    state.lost = true
                    if let waiter = state.waiter {
                        state.waiter = nil
                        return (waiter.continuation, .failure(error), false, false)
                    }
                    state.failure = error
                    return (nil, .success([]), false, false)
                }
            }
            waiter?.resume(with: answer)
            if pause { interrupt.wait(for: PostgresListener.unwatchedDrainInterval) }
            if again { drain() }
        }
    }

    /// Ends the drain; the thread closes the session and ends.
    func stop() {
        let waiter = state.withLock { state in
            state.stopped = true
            defer { state.waiter = nil }
            return state.waiter?.continuation
        }
        waiter?.resume(throwing: CancellationError())
        interrupt.signal()
        worker.stop()
    }
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

    /// Waits up to `duration` for a signal, and takes it.
    func wait(for duration: Duration) {
        var descriptor = pollfd(fd: readEnd, events: Int16(POLLIN), revents: 0)
        guard poll(&descriptor, 1, Int32(clamping: duration.wholeMilliseconds)) > 0 else { return }
        var sink = [UInt8](repeating: 0, count: 64)
        while read(readEnd, &sink, sink.count) > 0 {}
    }

    deinit {
        close(readEnd)
        close(writeEnd)
    }
}
