import Dispatch
import EventLog
import Foundation
import InboxDomain
import Lifecycle
import PlantedSlowdown
import PostgresClient
import Synchronization

/// The async driver: keeps one projection's live tables current with the log. A `Service` on a
/// `LeasedLoop`.
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
public final class Projector: Service {
    public struct Options: Sendable {
        /// Events per batch when the projector is keeping up. While it is behind (a read comes back
        /// full) the batch doubles, up to `maximumBatchSize`, and falls back when it has caught up.
        public var batchSize = 1000
        public var maximumBatchSize = 10_000
        /// A projection with an in-memory fold (the bell, the threads) whose live tables are empty
        /// catches up on up to this many events as a replay does: folded in memory and written
        /// with COPY, with its checkpoint, in one transaction (`INBOX_REPLAY_MEMORY_EVENTS`; about
        /// half a GiB a million events of the benchmark's mix). 0: batch by batch through SQL from the start.
        public var inMemoryEvents = 2_000_000
        /// The in-memory catch-up's batches (a replay's). A projector told to stop while it catches
        /// up stops after the batch it is folding, and writes what it folded.
        public var inMemoryBatch = 20_000
        public var pollInterval: Duration = .seconds(1)
        /// How often a node without the lease tries to take it.
        public var leaseRetry: Duration = .milliseconds(500)
        /// Waits between tries of a batch that failed for a transient reason.
        public var backoff = Backoff(initial: .milliseconds(100), maximum: .seconds(5))
        /// The least time from a read of the log that found events to the next read. Every append's
        /// commit wakes every projector (NOTIFY); while writers commit hundreds of times a second,
        /// the events of several commits are then read (and applied) at once instead of one read,
        /// one transaction and one decoding each. A write after a quiet moment (the last read found
        /// nothing) is read at once.
        public var readInterval: Duration = .milliseconds(20)

        public init(
            batchSize: Int = 1000, maximumBatchSize: Int = 10_000, inMemoryEvents: Int = 2_000_000, pollInterval: Duration = .seconds(1),
            leaseRetry: Duration = .milliseconds(500), backoff: Backoff = Backoff(initial: .milliseconds(100), maximum: .seconds(5)),
            readInterval: Duration = .milliseconds(20), inMemoryBatch: Int = 20_000
        ) {
            self.readInterval = max(.zero, readInterval)
            self.inMemoryBatch = max(1, inMemoryBatch)
            self.batchSize = max(1, batchSize)
            self.maximumBatchSize = max(self.batchSize, maximumBatchSize)
            self.inMemoryEvents = max(0, inMemoryEvents)
            self.pollInterval = pollInterval
            self.leaseRetry = leaseRetry
            self.backoff = backoff
        }
    }

    /// What a projector reports as it goes, for tests (the logger gets the same in words).
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
        /// deadlock): it is tried again after a backoff.
        case retrying(String)
    }

    public let projection: any Projection
    private let loop: LeasedLoop<ProjectorWork>

    public init(
        projection: any Projection, configuration: PostgresConfiguration, options: Options = Options(),
        clock: any Clock<Duration> = ContinuousClock(), logger: Logger = .silent,
        report: @escaping @Sendable (Report) -> Void = { _ in }
    ) {
        self.projection = projection
        let logger = logger.with(["projection": .string(projection.name)])
        let work = ProjectorWork(projection: projection, options: options, logger: logger, report: report, configuration: configuration)
        loop = LeasedLoop(
            name: "project-\(projection.name)", work: work, configuration: configuration,
            lease: Lease(lockClass: ProjectionLease.leaseLockClass, key: projection.name),
            channels: [EventStore.notificationChannel],
            options: .init(pollInterval: options.pollInterval, leaseRetry: options.leaseRetry, backoff: options.backoff),
            clock: clock, logger: logger,
            observe: { event in
                switch event {
                case .waitingForLease: report(.waitingForLease)
                case .tookLease(let pid): report(.tookLease(backendPID: pid))
                case .retrying(let error, _): report(.retrying(error))
                case .listening: break
                }
            },
            appendsEvents: false)
    }

    /// Runs until the task is cancelled (then throws `CancellationError`). Connection failures are
    /// retried and the lease is taken again; a failure that is neither about the events nor
    /// transient ends it.
    public func run() async throws {
        try await loop.run(from: ProjectorWork.State(batchSize: loop.work.options.batchSize))
    }
}

/// One projector's turns: where the live tables stand, then batch after batch.
struct ProjectorWork: LoopWork {
    struct State: Sendable {
        var position: ProjectionPosition?
        var idle = CaughtUpWait()
        var batchSize: Int
        var reportedMismatch: Int?
        /// The in-memory catch-up from empty tables was refused (its rows could not be written):
        /// batch by batch from here.
        var foldRefused = false
        /// Read past and not written yet: the batches since the checkpoint held no event this
        /// projection takes (nor one it cannot read). See `skippedBeforeWriting`.
        var skipped: (checkpoint: Checkpoint, events: Int, at: ContinuousClock.Instant)?
        /// When the last read of the log that found events began (`Options.readInterval`).
        var lastRead: ContinuousClock.Instant?
    }

    /// How many events a projector reads past, none of them its, before it writes its checkpoint
    /// past them. Writing is a transaction that locks the checkpoint row, so it holds a transaction
    /// id, and until the projectors' sessions were named as sessions that never append, no inline
    /// writer was next in the log while it lasted (docs/projections.md): a projector that wrote
    /// its checkpoint past every group of message posts (the people and the preferences take none
    /// of them) made one group in fourteen leave its projections to the async projectors. It is
    /// still work for nothing. Written at the latest when the projector has found nothing new for a
    /// poll interval (the log is quiet then), or with its next batch that has work; below the
    /// inline driver's `catchUpLimit`, so that what an inline writer finds pending stays within it.
    static let skippedBeforeWriting = 250

    private enum Outcome: Sendable {
        case applied(Int, [DeadLetter], Checkpoint, full: Bool)
        /// Read past events none of which were this projection's, not written yet (`State.skipped`).
        case skipped(full: Bool)
        case caughtUp(heldBack: Bool)
        case moved(ProjectionPosition)
        /// Nothing was applied; try again (batch by batch).
        case refused
    }

    let projection: any Projection
    let options: Projector.Options
    let logger: Logger
    let report: @Sendable (Projector.Report) -> Void
    /// For the in-memory catch-up's reader: a session of its own while it lasts (no lease is needed
    /// to read), so that it reads the next batch while it folds this one. Batch by batch, the
    /// projector reads on the lease's session and holds two connections, that one and the listener's.
    let configuration: PostgresConfiguration

    func begin(_ state: inout State, on session: LeasedSession) async throws {
        let projection = self.projection
        state.position = try await session.run { connection in try ProjectionState.prepareLive(projection, on: connection) }
        state.batchSize = options.batchSize
        // What was read past under a lease held before is read again from the row: another node
        // may have applied from there meanwhile.
        state.skipped = nil
    }

    func step(_ state: inout State, on session: LeasedSession) async throws -> LoopStep {
        guard let position = state.position else { throw LeaseLost() }
        if position.version != projection.version {
            // This release cannot apply to these tables. Give the lease up, so that a node of the
            // release that can (an older one until a replay swaps, a newer one after) keeps them
            // current, and look again later.
            if state.reportedMismatch != position.version { reportMismatch(live: position.version) }
            state.reportedMismatch = position.version
            return .releaseLease(retryAfter: options.pollInterval)
        }
        switch try await nextBatch(after: position, limit: state.batchSize, state: &state, on: session) {
        case .applied(let count, let parked, let checkpoint, let full):
            state.position?.checkpoint = checkpoint
            state.skipped = nil
            state.batchSize = full ? min(state.batchSize * 2, options.maximumBatchSize) : options.batchSize
            if !parked.isEmpty {
                logger.error("parked events that could not be applied", metadata: ["parked": .int(parked.count), "checkpoint": "\(checkpoint)"])
            }
            report(.applied(events: count, parked: parked.count, checkpoint: checkpoint))
            return .more
        case .moved(let current):
            // An inline writer or a replay's swap moved it; resume there.
            state.position = current
            state.skipped = nil
            report(.checkpointMoved(to: current.checkpoint))
            return .more
        case .skipped(let full):
            return full ? .more : .wait(state.idle.wait(heldBack: false, pollInterval: options.pollInterval))
        case .caughtUp(let heldBack):
            return .wait(state.idle.wait(heldBack: heldBack, pollInterval: options.pollInterval))
        case .refused:
            return .more
        }
    }

    /// Reads the batch after `expected` and applies it with its checkpoint in one transaction, unless
    /// somebody moved the checkpoint meanwhile.
    private func nextBatch(after expected: ProjectionPosition, limit: Int, state: inout State, on session: LeasedSession) async throws -> Outcome {
        let projection = self.projection
        let types = projection.eventTypes
        let from = state.skipped?.checkpoint ?? expected.checkpoint
        if let last = state.lastRead, ContinuousClock.now < last + options.readInterval {
            try await Task.sleep(until: last + options.readInterval, clock: .continuous)
        }
        let readStarted = ContinuousClock.now
        let (stored, records) = try await session.run { connection in
            try ProjectionState.readWithEvents(projection.name, after: from, limit: limit, on: connection)
        }
        // Only a read that found something new counts: after a quiet moment (polls that found
        // nothing), the next write is read at once.
        state.lastRead = records.isEmpty ? nil : readStarted
        guard let stored else { throw LeaseLost() }
        // An inline writer (or a replay's swap) moved it: resume there, without the transaction
        // that would find that out under the row's lock.
        if !stored.isAt(expected) { return .moved(stored) }
        Planted.spend(.catchUp, units: records.count)
        let batch = DecodedBatch(decodingInParallel: records, types: types)
        guard let last = batch.records.last else {
            if let skipped = state.skipped {
                // Written once nothing new came for a poll interval: while writers go on, a write
                // here would be in their way as much as one after every batch.
                if ContinuousClock.now - skipped.at >= options.pollInterval {
                    return try await writeSkipped(through: skipped.checkpoint, expected: expected, on: session)
                }
                return .caughtUp(heldBack: false)
            }
            let heldBack = try await session.run { connection in try EventStore.hasCommittedEvents(after: expected.checkpoint, on: connection) }
            return .caughtUp(heldBack: heldBack)
        }
        let full = batch.records.count == limit
        if state.skipped == nil, full, expected.checkpoint == .start, expected.eventsApplied == 0, options.inMemoryEvents > 0, !state.foldRefused,
            let fold = ReplayFolds.make(for: projection)
        {
            return try await catchUpInMemory(fold, from: expected, first: batch, state: &state, on: session)
        }
        if batch.events.isEmpty, batch.unreadable.isEmpty {
            let events = (state.skipped?.events ?? 0) + batch.records.count
            if events < Self.skippedBeforeWriting {
                state.skipped = (last.checkpoint, events, ContinuousClock.now)
                return .skipped(full: full)
            }
            return try await writeSkipped(through: last.checkpoint, expected: expected, on: session)
        }
        return try await session.run { connection -> Outcome in
            try connection.transaction { connection -> Outcome in
                if let moved = try Self.movedUnderLock(projection.name, from: expected, on: connection) { return .moved(moved) }
                let context = ProjectionContext(connection: connection, schema: ProjectionState.liveSchema, mode: .live)
                let outcome = try ProjectionBatchApplier.apply(batch, to: projection, in: context)
                try ProjectionBatchApplier.park(outcome.parked, into: "projection_dead_letters", on: connection)
                try ProjectionState.advance(projection.name, to: last.checkpoint, applied: outcome.applied, on: connection)
                return .applied(outcome.applied, outcome.parked, last.checkpoint, full: full)
            }
        }
    }

    /// Locks the checkpoint row for the rest of the transaction (every batch does this first: it
    /// waits for a swap or another writer, then sees their result); nil when the row is where this
    /// projector left it, else where it is now.
    private static func movedUnderLock(_ name: String, from expected: ProjectionPosition, on connection: PostgresConnection) throws -> ProjectionPosition? {
        guard let current = try ProjectionState.read(name, on: connection, lock: true) else { throw LeaseLost() }
        return current.isAt(expected) ? nil : current
    }

    /// The checkpoint written past events none of which were this projection's, in a transaction
    /// that locks its row and checks it has not moved, as every batch does.
    private func writeSkipped(through checkpoint: Checkpoint, expected: ProjectionPosition, on session: LeasedSession) async throws -> Outcome {
        let name = projection.name
        return try await session.run { connection -> Outcome in
            try connection.transaction { connection -> Outcome in
                if let moved = try Self.movedUnderLock(name, from: expected, on: connection) { return .moved(moved) }
                try ProjectionState.advance(name, to: checkpoint, applied: 0, on: connection)
                return .applied(0, [], checkpoint, full: false)
            }
        }
    }

    /// From empty tables (nothing applied yet), far behind: the log folded in memory by the
    /// replay's fold (`ReplayFold`, `.live`: the bell enqueues what it sends), up to
    /// `options.inMemoryEvents` events, the next batch read while one is folded; then the rows,
    /// the outbox, the dead letters and the checkpoint written in one transaction that first locks
    /// the checkpoint row and checks it has not moved, as every batch does. A process killed
    /// before that commit has written nothing, and starts again. Told to stop (its task
    /// cancelled), it reads no further batch: it writes what it has folded, so the role stops
    /// within a batch's fold and that write rather than the whole catch-up, and keeps that work;
    /// the next holder of the lease goes on batch by batch from there.
    private func catchUpInMemory(
        _ type: any ReplayFold.Type, from expected: ProjectionPosition, first: DecodedBatch, state: inout State, on session: LeasedSession
    ) async throws -> Outcome {
        let projection = self.projection, types = projection.eventTypes, limit = options.inMemoryBatch
        // Ended once the batches are read (after a read still under way, should a fold throw).
        let reader = PostgresSession(configuration: configuration, applicationName: "inbox-project-\(projection.name)-reader")
        defer { reader.close() }
        let fold = ReplayFoldState(type, mode: .live)
        var unreadable: [DeadLetter] = []
        var batch = first
        var events = 0
        var last = expected.checkpoint
        while true {
            guard let end = batch.records.last?.checkpoint else { break }
            // The first batch is full (or this would not run); the others are a replay's size.
            let more = events == 0 || batch.records.count == limit
            events += batch.records.count
            last = end
            let next =
                more && events < options.inMemoryEvents && !Task.isCancelled
                ? Task { try await reader.run { connection in try Self.read(after: end, limit: limit, types: types, on: connection) } } : nil
            unreadable += ProjectionBatchApplier.unreadable(batch, projection: projection)
            try await fold.apply(batch.events.filter { types.contains($0.record.type) }, projection: projection)
            guard let next, !Task.isCancelled else { break }
            batch = try await next.value
        }
        let through = last, unreadableEvents = unreadable
        // The bell's outbox goes in on a session of its own while the rows go in on this one: the
        // catch-up's longest statement, on the other core (`ReplayFold.sideWrite`). It commits
        // first: this transaction waits for it before its own commit.
        let side = fold.sideWrite().map {
            SideWrite($0, configuration: configuration, applicationName: "inbox-project-\(projection.name)-side [no appends]")
        }
        do {
            return try await session.run { connection -> Outcome in
                try connection.transaction { connection -> Outcome in
                    // Moved: whoever moved it applied these events, and its outbox rows are the
                    // side write's (the key keeps one of each).
                    if let moved = try Self.movedUnderLock(projection.name, from: expected, on: connection) { return .moved(moved) }
                    let context = ProjectionContext(connection: connection, schema: ProjectionState.liveSchema, mode: .live)
                    try fold.write(in: context)
                    try type.finish(in: context)
                    let parked = unreadableEvents + fold.outcome.parked
                    try ProjectionBatchApplier.park(parked, into: "projection_dead_letters", on: connection)
                    try ProjectionState.advance(projection.name, to: through, applied: fold.outcome.applied, on: connection)
                    try side?.wait()
                    return .applied(fold.outcome.applied, parked, through, full: true)
                }
            }
        } catch where ProjectionBatchApplier.isAboutTheEvents(error) {
            // The database refused the rows (data it cannot take): batch by batch, where each
            // event that fails on its own is parked.
            logger.error("the in-memory catch-up's rows were refused; going on batch by batch", metadata: ["error": "\(error)"])
            state.foldRefused = true
            return .refused
        }
    }

    /// A fold's side write (`ReplayFold.sideWrite`), started at once in a transaction of its own on
    /// a session of its own, which a connection's thread waits for.
    final class SideWrite: Sendable {
        private let done = DispatchSemaphore(value: 0)
        private let result = Mutex<Result<Void, any Error>?>(nil)

        init(_ write: @escaping ReplaySettledWrite, configuration: PostgresConfiguration, applicationName: String) {
            let session = PostgresSession(configuration: configuration, applicationName: applicationName)
            Task { [self] in
                let outcome: Result<Void, any Error>
                do {
                    try await session.run { connection in
                        try connection.transaction { connection in
                            try write(ProjectionContext(connection: connection, schema: ProjectionState.liveSchema, mode: .live))
                        }
                    }
                    outcome = .success(())
                } catch {
                    outcome = .failure(error)
                }
                session.close()
                self.result.withLock { $0 = outcome }
                self.done.signal()
            }
        }

        /// Blocks until the write has committed (or throws what it failed with). Called on a
        /// connection's thread, never on the cooperative pool's.
        func wait() throws {
            done.wait()
            done.signal()
            try result.withLock { $0 }?.get()
        }
    }

    /// Up to `limit` events after `checkpoint`, gap-safe, decoded (only `types`, and those this
    /// release does not know) on every core.
    private static func read(after checkpoint: Checkpoint, limit: Int, types: Set<String>, on connection: PostgresConnection) throws -> DecodedBatch {
        let records = try EventStore.read(after: checkpoint, limit: limit, on: connection)
        Planted.spend(.catchUp, units: records.count)
        return DecodedBatch(decodingInParallel: records, types: types)
    }

    private func reportMismatch(live: Int) {
        let name = projection.name
        logger.error(
            live < projection.version
                ? "the live tables are of an older version: run `inbox replay --projection \(name)`"
                : "the live tables are of a newer version than this release: this node waits",
            metadata: ["live": .int(live), "release": .int(projection.version)])
        report(.versionMismatch(live: live, code: projection.version))
    }
}
