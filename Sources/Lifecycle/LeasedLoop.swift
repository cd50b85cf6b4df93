import Encodings
import PostgresClient

/// What a `LeasedLoop` does on each turn; the loop does the rest.
///
/// The loop calls `begin` whenever it has a session (a new one after the old was lost), holds
/// the lease if it takes one, and is listening, so that nothing announced after `begin` is missed.
/// Then it calls `step` until the task is cancelled, waiting for a notification or a timeout
/// between steps as the step says. `State` lives across sessions: `begin` decides what of it to
/// read again.
public protocol LoopWork: Sendable {
    associatedtype State: Sendable

    func begin(_ state: inout State, on session: LeasedSession) async throws
    func step(_ state: inout State, on session: LeasedSession) async throws -> LoopStep
    /// The notifications that woke the loop, before the next step.
    func received(_ notifications: [PostgresNotification], state: inout State)
    /// The session was lost (the loop retries) or the loop is stopping: whatever relied on it
    /// being current stops relying on it.
    func ended(_ state: inout State)
}

extension LoopWork {
    public func received(_ notifications: [PostgresNotification], state: inout State) {}
    public func ended(_ state: inout State) {}
}

/// What the loop does after a step.
public enum LoopStep: Sendable, Equatable {
    /// Step again at once: there is more to do.
    case more
    /// Wait for a notification or for `timeout` (the poll interval when nil), then step again.
    case wait(Duration?)
    /// Give the lease up, wait `retryAfter`, then take it again and begin anew: another node may
    /// do this work better meanwhile (a projector of the release that matches the tables).
    case releaseLease(retryAfter: Duration)
}

/// An advisory-lock lease: held by one session of the whole cluster at a time, gone with it.
public struct Lease: Sendable, Hashable {
    /// The lock's class (its first key); the second is `hashtext(key)`.
    public var lockClass: Int32
    public var key: String

    public init(lockClass: Int32, key: String) {
        self.lockClass = lockClass
        self.key = key
    }
}

/// The loop's own session, handed to the work. With a lease, every call first checks that it runs
/// on the session that took the lease: on a new session (the old one was lost, and its lock with
/// it) it throws, and the loop takes the lease again before anything runs unprotected.
public struct LeasedSession: Sendable {
    let session: PostgresSession
    let leaseHolder: Int32?

    public func run<T: Sendable>(_ body: @escaping @Sendable (PostgresConnection) throws -> T) async throws -> T {
        let holder = leaseHolder
        return try await session.run { connection in
            if let holder, connection.backendPID != holder { throw LeaseLost() }
            return try body(connection)
        }
    }

    /// The backend that holds the lease, if the loop takes one.
    public var leaseBackendPID: Int32? { leaseHolder }
}

/// The session holding the lease is gone (or never held it): the loop takes it again.
public struct LeaseLost: Error, Sendable {
    public init() {}
}

/// Doubling waits between retries, from `initial` up to `maximum`, back to `initial` after a success.
public struct Backoff: Sendable, Equatable {
    public var initial: Duration
    public var maximum: Duration
    private var next: Duration

    public init(initial: Duration = .milliseconds(100), maximum: Duration = .seconds(5)) {
        self.initial = initial
        self.maximum = max(initial, maximum)
        next = initial
    }

    /// The wait before the next try; each call doubles the one after, up to the maximum.
    public mutating func nextDelay() -> Duration {
        let delay = next
        next = min(next * 2, maximum)
        return delay
    }

    public mutating func reset() { next = initial }
}

/// The one loop behind every role that follows the database: "take the lease, listen, work until
/// caught up, wait for NOTIFY or the poll interval, retry what failed for a while, start over on a
/// new session when the old one was lost".
///
/// Guarantees:
/// - **One holder.** With a lease, `begin` and every `step` run only on the session that holds the
///   advisory lock; another node's loop waits, retrying every `leaseRetry`, and takes over when the
///   holder's session ends.
/// - **Nothing missed.** The loop listens before `begin`, and a wait after a step returns early on a
///   notification; a lost notification costs at most the poll interval.
/// - **Transient failures are retried** (by default a `PostgresError` that `isTransient`) after a
///   backoff; a lost session is opened again, the lease taken again and `begin` called again. Other
///   errors end `run()`.
/// - **Prompt stop.** Cancellation ends every wait at once (a lease retry, a backoff, a poll
///   interval); a step in flight finishes first. The session is closed on the way out, which
///   releases the lease.
/// - **Time is the injected clock's**, so tests move a `TestClock` instead of sleeping.
/// - **A loop that never appends says so** (`appendsEvents: false`): its session is named as one
///   (`SessionsThatNeverAppend`), the database refuses its inserts into the log, and inline writers
///   are not held back by its transactions.
public struct LeasedLoop<Work: LoopWork>: Sendable {
    public struct Options: Sendable {
        /// The wait after a step that says `.wait(nil)`.
        public var pollInterval: Duration = .seconds(1)
        /// How often a loop without the lease tries to take it.
        public var leaseRetry: Duration = .milliseconds(500)
        public var backoff = Backoff()

        public init(pollInterval: Duration = .seconds(1), leaseRetry: Duration = .milliseconds(500), backoff: Backoff = Backoff()) {
            self.pollInterval = pollInterval
            self.leaseRetry = leaseRetry
            self.backoff = backoff
        }
    }

    /// What the loop went through, for logs and tests.
    public enum Event: Sendable, Equatable {
        case waitingForLease
        case tookLease(backendPID: Int32)
        case listening
        case retrying(error: String, after: Duration)
    }

    public let name: String
    public let work: Work
    private let configuration: PostgresConfiguration
    private let lease: Lease?
    private let channels: [String]
    private let options: Options
    private let clock: any Clock<Duration>
    private let logger: Logger
    private let isRetryable: @Sendable (any Error) -> Bool
    private let observe: @Sendable (Event) -> Void
    private let appendsEvents: Bool

    public init(
        name: String, work: Work, configuration: PostgresConfiguration, lease: Lease? = nil, channels: [String] = [],
        options: Options = Options(), clock: any Clock<Duration> = ContinuousClock(), logger: Logger = .silent,
        isRetryable: @escaping @Sendable (any Error) -> Bool = { ($0 as? PostgresError)?.isTransient ?? false },
        observe: @escaping @Sendable (Event) -> Void = { _ in },
        appendsEvents: Bool = true
    ) {
        self.name = name
        self.appendsEvents = appendsEvents
        self.work = work
        self.configuration = configuration
        self.lease = lease
        self.channels = channels
        self.options = options
        self.clock = clock
        self.logger = logger.with(["loop": .string(name)])
        self.isRetryable = isRetryable
        self.observe = observe
    }

    /// Runs `loops` side by side (a fan-out's or a mailer's several loops of one work), each from
    /// `initial`, until the task is cancelled or one of them fails for a reason it does not retry:
    /// that error is logged (`stopped`) and thrown, and the other loops are cancelled.
    public static func runSideBySide(_ loops: [LeasedLoop], from initial: Work.State, logger: Logger, stopped: String) async throws {
        try await withThrowingTaskGroup(of: Void.self) { group in
            for loop in loops { group.addTask { try await loop.run(from: initial) } }
            do {
                try await group.next()
            } catch is CancellationError {
            } catch {
                logger.error(stopped, metadata: ["error": "\(error)"])
                group.cancelAll()
                throw error
            }
            group.cancelAll()
        }
    }

    /// Runs until the task is cancelled (then throws `CancellationError`) or a step fails for a
    /// reason that is not retried.
    public func run(from initial: Work.State) async throws {
        // A loop whose work never appends says so, so that inline writers are not held back by
        // its transactions (`SessionsThatNeverAppend`).
        let applicationName = appendsEvents ? "inbox-\(name)" : SessionsThatNeverAppend.applicationName("inbox-\(name)")
        let session = PostgresSession(configuration: configuration, applicationName: applicationName)
        let listener = channels.isEmpty ? nil : try PostgresListener(configuration: configuration, channels: channels, applicationName: "inbox-\(name)-listener")
        var state = initial
        do {
            try await turns(&state, session: session, listener: listener)
        } catch {
            work.ended(&state)
            // The lease is free for another node once `run()` has returned.
            await session.end()
            throw error
        }
    }

    /// Takes the lease, listens, begins and steps, again and again, until cancelled or a failure
    /// that is not retried.
    private func turns(_ state: inout Work.State, session: PostgresSession, listener: PostgresListener?) async throws {
        var backoff = options.backoff
        var reportedWaiting = false
        var reportedHolder: Int32?
        while !Task.isCancelled {
            do {
                guard let holder = try await takeLease(on: session) else {
                    if !reportedWaiting { record(.waitingForLease, "waiting for the lease: another node holds it") }
                    reportedWaiting = true
                    reportedHolder = nil
                    try await clock.sleep(for: options.leaseRetry)
                    continue
                }
                reportedWaiting = false
                if let holder, holder != reportedHolder {
                    // Once per session that takes it: a loop that keeps its session keeps its lease.
                    record(.tookLease(backendPID: holder), "took the lease", ["backend": "\(holder)"])
                    reportedHolder = holder
                }
                let leased = LeasedSession(session: session, leaseHolder: holder)
                if let listener {
                    try await listener.start()
                    record(.listening, nil)
                }
                try await work.begin(&state, on: leased)
                try await steps(&state, on: leased, listener: listener, backoff: &backoff)
            } catch is LeaseLost {
                work.ended(&state)
                reportedHolder = nil
            } catch where Task.isCancelled {
                // Whatever failed while stopping: the loop was told to stop, and stops.
                throw CancellationError()
            } catch where isRetryable(error) && !(error is CancellationError) {
                work.ended(&state)
                let delay = backoff.nextDelay()
                record(
                    .retrying(error: "\(error)", after: delay), "retrying after a failure", ["error": "\(error)", "afterMilliseconds": "\(delay.wholeMilliseconds)"],
                    level: .warning)
                try await clock.sleep(for: delay)
            }
        }
        throw CancellationError()
    }

    /// Steps until cancelled; returns only by throwing (a lost lease, a failure, cancellation).
    private func steps(_ state: inout Work.State, on session: LeasedSession, listener: PostgresListener?, backoff: inout Backoff) async throws {
        while !Task.isCancelled {
            let next = try await work.step(&state, on: session)
            backoff.reset()
            switch next {
            case .more:
                continue
            case .wait(let timeout):
                let notifications = try await wait(for: timeout ?? options.pollInterval, listener: listener)
                if !notifications.isEmpty { work.received(notifications, state: &state) }
            case .releaseLease(let retryAfter):
                if let lease {
                    try await session.run { connection in
                        _ = try connection.query("SELECT pg_advisory_unlock($1, hashtext($2))", lease.lockClass, lease.key)
                    }
                }
                try await clock.sleep(for: retryAfter)
                throw LeaseLost()
            }
        }
        throw CancellationError()
    }

    /// The lease's holder (this session's backend), nil while another session holds it; without a
    /// lease, no backend (`Optional(nil)`), which lets every session run.
    private func takeLease(on session: PostgresSession) async throws -> Int32?? {
        guard let lease else { return .some(nil) }
        let holder = try await session.run { connection -> Int32? in
            // Taken once per session: an advisory lock taken twice must be released twice.
            let taken = try connection.query(
                """
                SELECT CASE WHEN EXISTS (
                           SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()
                           AND classid = $1::int::oid AND objid = hashtext($2)::oid AND objsubid = 2)
                       THEN true ELSE pg_try_advisory_lock($1, hashtext($2)) END
                """, lease.lockClass, lease.key
            ).scalar(Bool.self)
            return taken ? connection.backendPID : nil
        }
        guard let holder else { return nil }
        return .some(holder)
    }

    /// Until a notification, the timeout, or cancellation. The timeout is the clock's: with a test
    /// clock, only the test moving it ends the wait (or a notification does).
    private func wait(for timeout: Duration, listener: PostgresListener?) async throws -> [PostgresNotification] {
        guard let listener else {
            try await clock.sleep(for: timeout)
            return []
        }
        if clock is ContinuousClock { return try await listener.next(timeout: timeout) }
        let clock = self.clock
        return try await withThrowingTaskGroup(of: [PostgresNotification].self) { group in
            group.addTask { try await listener.next(timeout: .seconds(3600)) }
            group.addTask {
                try await clock.sleep(for: timeout)
                return []
            }
            defer { group.cancelAll() }
            return try await group.next() ?? []
        }
    }

    private func record(_ event: Event, _ message: String?, _ metadata: Logger.Metadata = [:], level: Logger.Level = .info) {
        observe(event)
        if let message { logger.log(level: level, message, metadata: metadata) }
    }
}
