import EventLog
import Foundation
import InboxDomain
import PostgresClient

/// The async driver: keeps one projection's live tables current with the log.
///
/// Guarantees:
/// - **Exactly once.** Each batch's read-model changes and its checkpoint commit in one
///   transaction that first locks the checkpoint row and checks it is where this projector left
///   it; a process killed at any point resumes from the last committed batch.
/// - **One node at a time.** The projector holds a session advisory lock (its lease) on a session
///   of its own, and every batch runs on that session. Another node waits for the lock and takes
///   over when the holder's session ends, which PostgreSQL notices when the process dies.
/// - **Gap-safe.** It reads with `read_events_after` (see docs/event-log.md) and wakes on NOTIFY or
///   after the poll interval.
/// - **Poison events are parked**, counted in `projection_dead_letters`, and the projector goes on.
public final class Projector: Sendable {
    public struct Options: Sendable {
        /// Events per batch when the projector is keeping up. While it is behind (a read comes back
        /// full) the batch doubles, up to `maximumBatchSize`, and falls back when it has caught up.
        public var batchSize = 1000
        public var maximumBatchSize = 10_000
        public var pollInterval: Duration = .seconds(1)
        /// How often a node without the lease tries to take it.
        public var leaseRetry: Duration = .milliseconds(500)

        public init(
            batchSize: Int = 1000, maximumBatchSize: Int = 10_000, pollInterval: Duration = .seconds(1),
            leaseRetry: Duration = .milliseconds(500)
        ) {
            self.batchSize = max(1, batchSize)
            self.maximumBatchSize = max(self.batchSize, maximumBatchSize)
            self.pollInterval = pollInterval
            self.leaseRetry = leaseRetry
        }
    }

    /// What a projector reports as it goes, for logs and tests.
    public enum Report: Sendable, Hashable {
        case waitingForLease
        case tookLease(backendPID: Int32)
        case applied(events: Int, parked: Int, checkpoint: Checkpoint)
        /// The live tables are of another version than this release's: `inbox replay` first (or,
        /// for a newer version, this node is outdated). The projector gives up its lease, so a
        /// node that can apply to them takes it, and tries again after the poll interval.
        case versionMismatch(live: Int, code: Int)
        /// The checkpoint row was moved by somebody else (a replay's swap): resumed from there.
        case checkpointMoved(to: Checkpoint)
        /// A batch failed for a reason that is not about its events (the database went away, a
        /// deadlock): it is tried again after `leaseRetry`.
        case retrying(String)
    }

    public let projection: any Projection
    private let configuration: PostgresConfiguration
    private let options: Options
    private let report: @Sendable (Report) -> Void

    public init(
        projection: any Projection, configuration: PostgresConfiguration, options: Options = Options(),
        report: @escaping @Sendable (Report) -> Void = { _ in }
    ) {
        self.projection = projection
        self.configuration = configuration
        self.options = options
        self.report = report
    }

    private enum Step: Sendable {
        case applied(Int, [DeadLetter], Checkpoint, full: Bool)
        case caughtUp(heldBack: Bool)
        case moved(ProjectionPosition)
    }

    private struct LeaseLost: Error {}

    /// Runs until the task is cancelled. Connection failures are retried; the lease is taken again.
    public func run() async throws {
        let session = PostgresSession(configuration: configuration, applicationName: "inbox-project-\(projection.name)")
        let listener = try PostgresListener(
            configuration: configuration, channels: [EventStore.notificationChannel], applicationName: "inbox-project-listener")
        defer { session.close() }
        let projection = self.projection
        var waitingReported = false
        var reportedMismatch: Int?
        while !Task.isCancelled {
            do {
                let name = projection.name
                let leasePID = try await session.run { connection -> Int32? in
                    // Taken once per session: an advisory lock taken twice must be released twice.
                    let taken = try connection.query(
                        """
                        SELECT CASE WHEN EXISTS (
                                   SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()
                                   AND classid = $1::int::oid AND objid = hashtext($2)::oid AND objsubid = 2)
                               THEN true ELSE pg_try_advisory_lock($1, hashtext($2)) END
                        """, ProjectionLease.leaseLockClass, name
                    ).scalar(Bool.self)
                    return taken ? connection.backendPID : nil
                }
                guard let leasePID else {
                    if !waitingReported { report(.waitingForLease) }
                    waitingReported = true
                    try await Task.sleep(for: options.leaseRetry)
                    continue
                }
                waitingReported = false
                report(.tookLease(backendPID: leasePID))
                var position = try await session.run { connection in try ProjectionState.prepareLive(projection, on: connection) }
                try await listener.start()
                var idle = CaughtUpWait()
                var batchSize = options.batchSize
                while !Task.isCancelled {
                    if position.version != projection.version {
                        // This release cannot apply to these tables. Give the lease up, so that a
                        // node of the release that can (an older one until a replay swaps, a newer
                        // one after) keeps them current, and look again later.
                        if reportedMismatch != position.version { report(.versionMismatch(live: position.version, code: projection.version)) }
                        reportedMismatch = position.version
                        try await session.run { connection in
                            _ = try connection.query(
                                "SELECT pg_advisory_unlock($1, hashtext($2))", ProjectionLease.leaseLockClass, name)
                        }
                        try await Task.sleep(for: options.pollInterval)
                        throw LeaseLost()
                    }
                    let expected = position
                    let limit = batchSize
                    let step = try await session.run { connection -> Step in
                        // A new session has lost the lock the old one held: take the lease again.
                        guard connection.backendPID == leasePID else { throw LeaseLost() }
                        let records = try EventStore.read(after: expected.checkpoint, limit: limit, on: connection)
                        guard let last = records.last else {
                            let heldBack = try connection.query(
                                "SELECT EXISTS (SELECT 1 FROM events WHERE transaction_id > $1::text::xid8)",
                                Int64(expected.checkpoint.transactionId)
                            ).scalar(Bool.self)
                            return .caughtUp(heldBack: heldBack)
                        }
                        let batch = DecodedBatch(records, types: projection.eventTypes)
                        let full = records.count == limit
                        return try connection.transaction { connection -> Step in
                            guard let current = try ProjectionState.read(name, on: connection, lock: true) else { throw LeaseLost() }
                            if current.checkpoint != expected.checkpoint || current.version != expected.version {
                                return .moved(current)
                            }
                            let context = ProjectionContext(connection: connection, schema: ProjectionState.liveSchema, mode: .live)
                            let outcome = try ProjectionBatchApplier.apply(batch, to: projection, in: context)
                            try ProjectionBatchApplier.park(outcome.parked, into: "projection_dead_letters", on: connection)
                            try ProjectionState.advance(name, to: last.checkpoint, applied: outcome.applied, on: connection)
                            return .applied(outcome.applied, outcome.parked, last.checkpoint, full: full)
                        }
                    }
                    switch step {
                    case .applied(let count, let parked, let checkpoint, let full):
                        position.checkpoint = checkpoint
                        batchSize = full ? min(batchSize * 2, options.maximumBatchSize) : options.batchSize
                        report(.applied(events: count, parked: parked.count, checkpoint: checkpoint))
                    case .moved(let current):
                        position = current
                        report(.checkpointMoved(to: current.checkpoint))
                    case .caughtUp(let heldBack):
                        _ = try await listener.next(timeout: idle.wait(heldBack: heldBack, pollInterval: options.pollInterval))
                    }
                }
            } catch is LeaseLost {
                continue
            } catch let error as PostgresError where error.isTransient {
                // The batch was rolled back; it is read and applied again once the database answers.
                report(.retrying(error.description))
                try await Task.sleep(for: options.leaseRetry)
            }
        }
        throw CancellationError()
    }
}
