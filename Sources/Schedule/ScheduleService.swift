import Foundation
import Lifecycle
import PostgresClient

/// The schedule role (`inbox schedule`, and part of `inbox run`): checks the shop reminders every
/// `interval`, on one node at a time.
///
/// - **One node at a time.** It runs on a `LeasedLoop` under the lease `(0x1B0F, hashtext('schedule'))`;
///   another node's schedule waits and takes over when the holder's session ends. Each check is
///   also serialized on its own (`ShopReminders`), so even two holders could not remind twice.
/// - **A check at once, then every `interval`.** A node that takes the lease checks at once: what
///   was reminded is recorded, so checking early repeats nothing, and a takeover loses no time.
/// - **Time is injected:** `now` says when a check happens (the wall clock by default), `clock`
///   times the waits, so tests move both instead of sleeping.
/// - Logs one line per check that reminded something (shops, messages); stops at once when told to
///   (a check in flight finishes first: it is one short transaction).
public struct ScheduleService: Service {
    public struct Options: Sendable {
        /// The wait between two checks (INBOX_SCHEDULE_INTERVAL_SECONDS).
        public var interval: Duration
        public var leaseRetry: Duration

        public init(interval: Duration = .seconds(900), leaseRetry: Duration = .milliseconds(500)) {
            self.interval = interval
            self.leaseRetry = leaseRetry
        }
    }

    /// The schedule's lease: one node of the cluster checks at a time.
    public static let lease = Lease(lockClass: 0x1B0F, key: "schedule")

    private let loop: LeasedLoop<ScheduleWork>

    public init(
        configuration: PostgresConfiguration, reminders: ShopReminders = ShopReminders(), options: Options = Options(),
        now: @escaping @Sendable () -> Date = { Date() }, clock: any Clock<Duration> = ContinuousClock(), logger: Logger = .silent
    ) {
        let logger = logger.with(["role": "schedule"])
        loop = LeasedLoop(
            name: "schedule", work: ScheduleWork(reminders: reminders, interval: options.interval, now: now, logger: logger),
            configuration: configuration, lease: Self.lease,
            options: .init(pollInterval: options.interval, leaseRetry: options.leaseRetry), clock: clock, logger: logger,
            isRetryable: Self.isRetryable)
    }

    /// Transient database errors, and read models whose tables no projector has made yet (a
    /// schedule started first on a new database): both pass.
    static func isRetryable(_ error: any Error) -> Bool {
        guard let error = error as? PostgresError else { return false }
        return error.isTransient || error.sqlState == .undefinedTable
    }

    public func run() async throws {
        try await loop.run(from: ScheduleWork.State())
    }
}

/// One turn of the schedule: a check of the shop reminders, then a wait of the interval.
struct ScheduleWork: LoopWork {
    struct State: Sendable {
        var checkedIndex = false
        var waitingForProjections = false
    }

    let reminders: ShopReminders
    let interval: Duration
    let now: @Sendable () -> Date
    let logger: Logger

    /// How soon a check that found the read models behind is tried again.
    static let retryWhileBehind: Duration = .seconds(15)

    func begin(_ state: inout State, on session: LeasedSession) async throws {
        guard !state.checkedIndex else { return }
        state.checkedIndex = true
        // A replay by a release older than sql/012 builds the threads without the index; the check
        // still works, at the cost of reading every thread. Say so once.
        let present = try await session.run { connection in
            try connection.query("SELECT to_regclass('public.conversations_waiting') IS NOT NULL").scalar(Bool.self)
        }
        if !present {
            logger.warning("the index conversations_waiting is missing: each reminder check reads every thread until it is there (docs/schedule.md)")
        }
    }

    func step(_ state: inout State, on session: LeasedSession) async throws -> LoopStep {
        let at = now()
        let reminders = reminders
        let outcome = try await session.run { connection in try reminders.check(now: at, on: connection) }
        if !outcome.projectionsBehind.isEmpty {
            if !state.waitingForProjections {
                logger.warning(
                    "the read models are behind the log: the reminder check waits for them",
                    metadata: ["projections": .string(outcome.projectionsBehind.joined(separator: ","))])
            }
            state.waitingForProjections = true
            return .wait(min(interval, Self.retryWhileBehind))
        }
        state.waitingForProjections = false
        if !outcome.reminders.isEmpty {
            logger.info(
                "reminded shops of buyers waiting for an answer",
                metadata: ["shops": .int(outcome.reminders.count), "messages": .int(outcome.messages), "shopsHeldBack": .int(outcome.shopsHeldBack)])
        }
        return .wait(interval)
    }
}
