import EventLog
import Foundation
import PlantedSlowdown
import PostgresClient

/// The log as a replay reads it: batch after batch, each read once and decoded once for every
/// projection, with the projections free to go at their own pace.
///
/// A projection that is ahead does not wait for the slowest one after every batch; the feed reads
/// ahead of the slowest reader by at most `readAhead` batches, so a replay holds that many batches
/// at most whatever the length of the log.
actor ReplayFeed {
    private let client: PostgresClient
    /// The data keys of every batch read, for the replay's spilled events too.
    nonisolated let keyRing = KeyRing()
    private let batchSize: Int
    private let readAhead: Int
    private let readers: Int
    private var batches: [Int: Task<DecodedBatch, any Error>] = [:]
    /// Per batch, how many readers have not finished it yet.
    private var pendingReaders: [Int: Int] = [:]
    /// The first batch some reader has not finished.
    private var oldest = 0
    private var waiting: [(index: Int, continuation: CheckedContinuation<Void, Never>)] = []
    private let start: Checkpoint
    /// Where the feed ends even if the log goes on (a projection replayed again to where the others stand).
    private let end: Checkpoint?
    private var stopped = false
    /// The events of the batches every reader has finished.
    private var eventsDone: Int64 = 0

    init(client: PostgresClient, after start: Checkpoint, through end: Checkpoint? = nil, batchSize: Int, readers: Int, readAhead: Int = 3) {
        self.client = client
        self.start = start
        self.end = end
        self.batchSize = batchSize
        self.readers = readers
        self.readAhead = max(1, readAhead)
    }

    /// Batch `index` (0 is the first after the start), read after batch `index - 1`. Waits while it
    /// is more than `readAhead` batches ahead of the slowest reader.
    func batch(_ index: Int) async throws -> DecodedBatch {
        while index >= oldest + readAhead && !stopped {
            await withCheckedContinuation { continuation in waiting.append((index, continuation)) }
        }
        if stopped { throw CancellationError() }
        let task = task(for: index)
        // Reading the next one while this one is applied.
        _ = self.task(for: index + 1)
        return try await task.value
    }

    /// Lets every reader waiting for a batch go, with an error: one of them failed, and the replay
    /// stops.
    func stop() {
        stopped = true
        let ready = waiting
        waiting = []
        for reader in ready { reader.continuation.resume() }
    }

    /// A reader is done with batch `index` of `events` events; the batch is let go once every
    /// reader is. Returns then how many events every reader has finished.
    func finished(_ index: Int, events: Int) -> Int64? {
        let left = (pendingReaders[index] ?? readers) - 1
        pendingReaders[index] = left
        guard left == 0 else { return nil }
        eventsDone += Int64(events)
        defer { release(index) }
        return eventsDone
    }

    private func release(_ index: Int) {
        pendingReaders[index] = nil
        batches[index] = nil
        while pendingReaders[oldest] == nil && batches[oldest] == nil && oldest <= index { oldest += 1 }
        let ready = waiting.filter { $0.index < oldest + readAhead }
        waiting.removeAll { $0.index < oldest + readAhead }
        for reader in ready { reader.continuation.resume() }
    }

    private func task(for index: Int) -> Task<DecodedBatch, any Error> {
        if let task = batches[index] { return task }
        let previous = index == 0 ? nil : task(for: index - 1)
        let client = client, limit = batchSize, start = start, end = end, ring = keyRing
        let task = Task<DecodedBatch, any Error> {
            var after = start
            if let previous {
                let batch = try await previous.value
                guard let last = batch.checkpoint, batch.records.count == limit else { return DecodedBatch([]) }
                after = last
            }
            let position = after
            return try await client.withConnection { connection in
                var records = try EventStore.read(after: position, limit: limit, ring: ring, on: connection)
                // Cut short, so that the reader takes it for the last.
                if let end, let beyond = records.firstIndex(where: { $0.checkpoint > end }) { records.removeSubrange(beyond...) }
                Planted.spend(.replay, units: records.count)
                return DecodedBatch(decodingInParallel: records)
            }
        }
        batches[index] = task
        return task
    }
}
