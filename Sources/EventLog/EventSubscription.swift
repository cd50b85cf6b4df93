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
        after checkpoint: Checkpoint, options: SubscriptionOptions = SubscriptionOptions()
    ) -> AsyncThrowingStream<[RecordedEvent], any Error> {
        AsyncThrowingStream { continuation in
            let task = Task {
                do {
                    try await self.follow(after: checkpoint, options: options) { batch in
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
    /// The checkpoint advances only after `consume` returns.
    public func follow(
        after checkpoint: Checkpoint, options: SubscriptionOptions = SubscriptionOptions(),
        consume: @Sendable ([RecordedEvent]) async throws -> Void
    ) async throws {
        let listener = try PostgresListener(
            configuration: client.configuration.connection, channels: [Self.notificationChannel])
        var position = checkpoint
        var listening = false
        var idle = CaughtUpWait()
        while !Task.isCancelled {
            do {
                if !listening {
                    // Listen before reading, so an append between the read and the wait still wakes us.
                    try await listener.start()
                    listening = true
                }
                let batch = try await read(after: position, limit: options.batchSize)
                if let last = batch.last {
                    try await consume(batch)
                    position = last.checkpoint
                    if batch.count == options.batchSize { continue }
                }
                let wait = idle.wait(heldBack: try await hasCommittedEvents(after: position), pollInterval: options.pollInterval)
                _ = try await listener.next(timeout: wait)
            } catch let error as PostgresError where error.isConnectionError {
                listening = false
                try await Task.sleep(for: options.reconnectDelay)
            }
        }
        throw CancellationError()
    }
}

/// How long a reader that has read everything readable waits before it reads again (unless a
/// NOTIFY wakes it first). While events have committed behind an older transaction that is still
/// open (docs/event-log.md, gap-safe reads), it reads again after 10 ms, doubling up to the poll
/// interval, rather than a whole poll interval later.
public struct CaughtUpWait: Sendable {
    private var heldBackRetry = Duration.milliseconds(10)

    public init() {}

    /// The wait after a read that came back short; `heldBack` says whether committed events are
    /// being held back.
    public mutating func wait(heldBack: Bool, pollInterval: Duration) -> Duration {
        guard heldBack else {
            heldBackRetry = .milliseconds(10)
            return pollInterval
        }
        heldBackRetry = min(heldBackRetry * 2, pollInterval)
        return heldBackRetry
    }
}
