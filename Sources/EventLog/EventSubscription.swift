import Lifecycle
import PostgresClient

extension EventStore {
    /// How a subscriber waits for new events.
    public struct SubscriptionOptions: Sendable {
        /// The longest wait between two reads when no notification arrives. A lost notification
        /// costs at most this much latency, never an event.
        public var pollInterval: Duration = .seconds(1)
        /// Events per read.
        public var batchSize: Int = 1000
        /// Wait before retrying after the database could not be reached.
        public var reconnectDelay: Duration = .seconds(1)

        public init(pollInterval: Duration = .seconds(1), batchSize: Int = 1000, reconnectDelay: Duration = .seconds(1)) {
            self.pollInterval = pollInterval
            self.batchSize = batchSize
            self.reconnectDelay = reconnectDelay
        }
    }

    /// Batches of events after `checkpoint`, for as long as the stream is consumed: it reads until
    /// it is caught up, then wakes on NOTIFY from an append or after `pollInterval`, whichever comes
    /// first. Connection failures are retried; other errors end the stream.
    public func subscribe(
        after checkpoint: Checkpoint, options: SubscriptionOptions = SubscriptionOptions(), clock: any Clock<Duration> = ContinuousClock(),
        logger: Logger = .silent
    ) -> AsyncThrowingStream<[RecordedEvent], any Error> {
        AsyncThrowingStream { continuation in
            let task = Task {
                do {
                    try await self.follow(after: checkpoint, options: options, clock: clock, logger: logger) { batch in
                        if case .terminated = continuation.yield(batch) { throw CancellationError() }
                    }
                    continuation.finish()
                } catch is CancellationError {
                    continuation.finish()
                } catch {
                    continuation.finish(throwing: error)
                }
            }
            continuation.onTermination = { _ in task.cancel() }
        }
    }

    /// Hands batches after `checkpoint` to `consume` until the task is cancelled or `consume` throws.
    /// The checkpoint advances only after `consume` returns. Runs on a `LeasedLoop` without a
    /// lease: a session of its own, woken by NOTIFY or the poll interval of `clock`, transient
    /// failures retried after a backoff that starts at `reconnectDelay`.
    public func follow(
        after checkpoint: Checkpoint, options: SubscriptionOptions = SubscriptionOptions(), clock: any Clock<Duration> = ContinuousClock(),
        logger: Logger = .silent, consume: @escaping @Sendable ([RecordedEvent]) async throws -> Void
    ) async throws {
        let loop = LeasedLoop(
            name: "subscription", work: SubscriptionWork(batchSize: options.batchSize, pollInterval: options.pollInterval, consume: consume),
            configuration: client.configuration.connection, channels: [Self.notificationChannel],
            options: .init(pollInterval: options.pollInterval, backoff: Backoff(initial: options.reconnectDelay, maximum: max(options.reconnectDelay, .seconds(5)))),
            clock: clock, logger: logger)
        try await loop.run(from: SubscriptionWork.State(position: checkpoint))
    }
}

/// A subscriber's turns: read after the position, hand the batch over, then wait when caught up.
struct SubscriptionWork: LoopWork {
    struct State: Sendable {
        var position: Checkpoint
        var idle = CaughtUpWait()
    }

    let batchSize: Int
    let pollInterval: Duration
    let consume: @Sendable ([RecordedEvent]) async throws -> Void

    func begin(_ state: inout State, on session: LeasedSession) async throws {}

    func step(_ state: inout State, on session: LeasedSession) async throws -> LoopStep {
        let (position, limit) = (state.position, batchSize)
        // One trip to the session: the batch, and when it came back short, whether committed
        // events are held back behind where it ends.
        let (batch, heldBack) = try await session.run { connection -> ([RecordedEvent], Bool) in
            let batch = try EventStore.read(after: position, limit: limit, on: connection)
            guard batch.count < limit else { return (batch, false) }
            return (batch, try EventStore.hasCommittedEvents(after: batch.last?.checkpoint ?? position, on: connection))
        }
        if let last = batch.last {
            try await consume(batch)
            state.position = last.checkpoint
            if batch.count == batchSize { return .more }
        }
        return .wait(state.idle.wait(heldBack: heldBack, pollInterval: pollInterval))
    }
}

/// How long a reader that has read everything readable waits before it reads again (unless a
/// NOTIFY wakes it first). While events have committed behind an older transaction that is still
/// open (docs/event-log.md, gap-safe reads), it reads again after 10 ms, doubling up to a second
/// (or the poll interval, if shorter), rather than a whole poll interval later. Doubling up to the
/// poll interval itself made the wait after the older transaction ended about as long as it had
/// been open (held back for 7 s, a reader with a minute's poll interval could read 10 s later).
public struct CaughtUpWait: Sendable {
    private var heldBackRetry = Duration.milliseconds(10)
    /// The longest wait while events are held back: one cheap read a second while a transaction stays open.
    public static let longestHeldBackWait = Duration.seconds(1)

    public init() {}

    /// The wait after a read that came back short; `heldBack` says whether committed events are
    /// being held back.
    public mutating func wait(heldBack: Bool, pollInterval: Duration) -> Duration {
        guard heldBack else {
            heldBackRetry = .milliseconds(10)
            return pollInterval
        }
        heldBackRetry = min(heldBackRetry * 2, pollInterval, Self.longestHeldBackWait)
        return heldBackRetry
    }
}
