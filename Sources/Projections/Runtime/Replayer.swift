import Encodings
import EventLog
import Foundation
import InboxDomain
import Lifecycle
import PostgresClient
import Synchronization

/// The replay driver: rebuilds projections from the whole log into new tables beside the live
/// ones, while the live ones keep serving, then swaps them in in one transaction.
///
/// - Each projection gets a schema of its own (`replay_<name>`) with its tables at this release's
///   version, filled by the same fold as the live projector, in `.replay` mode, which never
///   enqueues a notification: the bell and the threads fold in memory and write their rows once
///   with COPY (`ReplayFold`), the others apply each batch through SQL.
/// - The log is read once for all the projections being replayed, and decoded on every core; each
///   projection goes at its own pace, at most a few batches ahead of the slowest. A replay that is
///   stopped is started again from the start (`prepare()`).
/// - `swap()` locks the live checkpoint rows (waiting for any batch of the async projector and any
///   inline writer), applies what is left, moves the live tables out and the new ones in, and
///   sets the live checkpoint to the replay's, all in one transaction. The old tables are dropped
///   after it commits.
public final class Replayer: Sendable {
    public struct Progress: Sendable, CustomStringConvertible {
        public var eventsDone: Int64
        public var eventsTotal: Int64
        public var elapsed: Duration
        /// After the pass over the log, the slice being folded (`replay: slice 2 of 5, 1843112 events`).
        public var stage: String?

        public init(eventsDone: Int64, eventsTotal: Int64, elapsed: Duration, stage: String? = nil) {
            self.eventsDone = eventsDone
            self.eventsTotal = eventsTotal
            self.elapsed = elapsed
            self.stage = stage
        }

        public var eventsPerSecond: Double {
            let seconds = elapsed.inSeconds
            return seconds > 0 ? Double(eventsDone) / seconds : 0
        }

        /// `replay: 120000 of about 1000000 events, 21000 events/s, about 42 s left`
        public var description: String {
            if let stage { return stage }
            var text = "replay: \(eventsDone) of about \(eventsTotal) events, \(Int(eventsPerSecond)) events/s"
            if let remaining { text += ", about \(max(1, remaining.components.seconds)) s left" }
            return text
        }

        /// Estimated time left at the rate so far.
        public var remaining: Duration? {
            let rate = eventsPerSecond
            guard rate > 0, eventsTotal > eventsDone else { return nil }
            return .milliseconds(Int64(Double(eventsTotal - eventsDone) / rate * 1000))
        }
    }

    /// The replay's own pool, of the size of the client it was given and on its database, whose
    /// sessions are marked as never appending (`SessionsThatNeverAppend`): a replay writes its
    /// tables and never the log, so its transactions (a slice's COPYs, the index builds, the swap)
    /// do not make the API's inline writers leave their projections to the async projectors
    /// meanwhile, and the database refuses an append on them.
    public let client: PostgresClient
    public let projections: [any Projection]
    public let batchSize: Int
    /// The most events of the log whose state a replay folds in memory at a time
    /// (`INBOX_REPLAY_MEMORY_EVENTS`): a longer log is folded in slices of people of about this
    /// many events each (`SlicedReplay`), one after the other, the later ones kept on disk in
    /// `spillDirectory` meanwhile. 0 replays every projection through SQL, batch by batch.
    public let inMemoryEventLimit: Int64
    /// Where the events of the slices after the first wait for their turn (`INBOX_REPLAY_SPILL_DIR`).
    public let spillDirectory: URL

    /// The projections whose new tables have their indexes (`buildIndexes`); `prepare` takes a
    /// projection out, its tables being new.
    private let indexed = Mutex<Set<String>>([])

    public init(
        client: PostgresClient, projections: [any Projection], batchSize: Int = 20_000, inMemoryEventLimit: Int64 = 2_000_000,
        spillDirectory: URL = FileManager.default.temporaryDirectory
    ) {
        self.client = client.separatePool(applicationName: SessionsThatNeverAppend.applicationName("inbox-replay"))
        self.projections = projections.sorted { $0.name < $1.name }
        self.batchSize = batchSize
        self.inMemoryEventLimit = inMemoryEventLimit
        self.spillDirectory = spillDirectory
    }

    deinit { client.close() }

    /// How many slices a log of `events` events is folded in.
    public func slices(forEvents events: Int64) -> Int {
        guard inMemoryEventLimit > 0 else { return 1 }
        return Int(max(1, (events + inMemoryEventLimit - 1) / inMemoryEventLimit))
    }

    public static func schemaName(for projection: any Projection) -> String { "replay_\(projection.name)" }

    /// Takes, on a session of its own, the replay lock of every projection this replayer rebuilds,
    /// so that two replays of one projection never drop each other's tables. Keep the session
    /// until the replay is done; closing it (or the process ending) releases the locks. Throws when
    /// another replay holds one of them.
    public func lock() async throws -> PostgresSession {
        let session = PostgresSession(configuration: client.configuration.connection, applicationName: "inbox-replay")
        let names = projections.map(\.name)
        let busy = try await session.run { connection in
            try names.filter { name in
                !(try connection.query("SELECT pg_try_advisory_lock($1, hashtext($2))", ProjectionLease.replayLockClass, name)
                    .scalar(Bool.self))
            }
        }
        guard busy.isEmpty else {
            session.close()
            throw ProjectionError("Another replay of \(busy.joined(separator: ", ")) is running; wait for it to finish.")
        }
        return session
    }

    /// Creates empty new tables for every projection, dropping what an earlier replay left.
    public func prepare() async throws { try await prepare(projections) }

    private func prepare(_ projections: [any Projection]) async throws {
        indexed.withLock { $0.subtract(projections.map(\.name)) }
        try await client.transaction { connection in
            for projection in projections {
                let schema = Self.schemaName(for: projection)
                try connection.execute("DROP SCHEMA IF EXISTS \"\(schema)\" CASCADE")
                try connection.execute("CREATE SCHEMA \"\(schema)\"")
                let context = ProjectionContext(connection: connection, schema: schema, mode: .replay)
                try projection.createTables(in: context)
                try connection.execute(
                    """
                    CREATE TABLE "\(schema)".dead_letters (LIKE projection_dead_letters INCLUDING ALL)
                    """)
                try connection.query(
                    """
                    INSERT INTO projection_replays (projection, version, schema_name) VALUES ($1, $2, $3)
                    ON CONFLICT (projection) DO UPDATE SET version = excluded.version, schema_name = excluded.schema_name,
                        transaction_id = '0', position = 0, events_applied = 0, started_at = clock_timestamp()
                    """, projection.name, Int32(projection.version), schema)
            }
        }
    }

    /// Applies the log to the new tables until what is left is less than one batch. Calls
    /// `progress` after every batch all the projections have taken in, and at each slice.
    ///
    /// The log is read and decoded once per batch (`ReplayFeed`), the next batch read while the
    /// last is applied. The projections with a `ReplayFold` fold in memory, in slices of people
    /// when the log is longer than `inMemoryEventLimit` (`SlicedReplay`), and write their tables
    /// with COPY (in COPYs of bounded size, each a transaction of its own: `ReplayCopy`), then
    /// their dead letters and their replay checkpoint in one transaction at the end;
    /// the others apply each batch on a connection of their own, in a transaction with their
    /// replay checkpoint. A fold that cannot be sliced over this log (`ReplaySliceRouter`) is
    /// rebuilt through SQL afterwards, to where the others stand. Each projection's indexes are
    /// built as soon as its tables are complete (`buildIndexes`), while the others still write.
    public func catchUp(progress: @escaping @Sendable (Progress) -> Void = { _ in }) async throws {
        let started = ContinuousClock.now
        let total = try await client.withConnection { connection in
            try connection.query("SELECT count(*) FROM events").scalar(Int64.self)
        }
        let start = try await replayCheckpoint()
        let folds: [(any Projection, any ReplayFold.Type)] =
            inMemoryEventLimit > 0 ? projections.compactMap { projection in ReplayFolds.make(for: projection).map { (projection, $0) } } : []
        let throughSQL = projections.filter { projection in !folds.contains { $0.0.name == projection.name } }
        let feed = ReplayFeed(client: client, after: start, batchSize: batchSize, readers: throughSQL.count + (folds.isEmpty ? 0 : 1))
        let report: @Sendable (Int64?) -> Void = { done in
            if let done { progress(Progress(eventsDone: done, eventsTotal: max(total, done), elapsed: ContinuousClock.now - started)) }
        }
        let sliced = SlicedReplay(
            client: client, folds: folds, slices: slices(forEvents: total), batchSize: batchSize, spillDirectory: spillDirectory)
        let outcome = try await withThrowingTaskGroup(of: (hazards: [SlicedReplay.Member], last: Checkpoint?)?.self) { group in
            for projection in throughSQL {
                group.addTask { [self] in
                    do {
                        try await replayThroughSQL(projection, from: feed, report: report)
                        try await buildIndexes(of: projection)
                        return nil
                    } catch {
                        await feed.stop()
                        throw error
                    }
                }
            }
            if !folds.isEmpty {
                group.addTask {
                    do {
                        return try await sliced.run(
                            from: feed, report: report,
                            progress: { stage in
                                progress(Progress(eventsDone: total, eventsTotal: total, elapsed: ContinuousClock.now - started, stage: stage))
                            },
                            completed: { [self] projection in try await buildIndexes(of: projection) })
                    } catch {
                        await feed.stop()
                        throw error
                    }
                }
            }
            var outcome: (hazards: [SlicedReplay.Member], last: Checkpoint?)?
            for try await result in group where result != nil { outcome = result }
            return outcome
        }
        guard let outcome, let last = outcome.last, !outcome.hazards.isEmpty else { return }
        for member in outcome.hazards {
            progress(
                Progress(
                    eventsDone: total, eventsTotal: total, elapsed: ContinuousClock.now - started,
                    stage: "replay: \(member.projection.name) cannot be folded in slices (\(member.hazard ?? "")): through SQL"))
            try await prepare([member.projection])
            let again = ReplayFeed(client: client, after: start, through: last, batchSize: batchSize, readers: 1)
            try await replayThroughSQL(member.projection, from: again) { _ in }
            try await buildIndexes(of: member.projection)
        }
    }

    /// Applies batch after batch to the projection's new tables, each in a transaction with the
    /// replay checkpoint.
    private func replayThroughSQL(_ projection: any Projection, from feed: ReplayFeed, report: @Sendable (Int64?) -> Void) async throws {
        var index = 0
        while true {
            let batch = try await feed.batch(index)
            if batch.checkpoint == nil { return }
            try await client.withConnection { connection in
                try connection.transaction { connection in try self.apply(batch, to: projection, on: connection) }
            }
            report(await feed.finished(index, events: batch.records.count))
            if batch.records.count < batchSize { return }
            index += 1
        }
    }

    /// Builds the new tables' other indexes (primary keys exist from the start) and updates their
    /// statistics, of the projections whose indexes `catchUp` has not built yet (it builds each
    /// projection's once its tables are complete, while the others may still be writing). `swap()`
    /// calls it first.
    public func buildIndexes() async throws {
        let left = projections.filter { projection in !indexed.withLock { $0.contains(projection.name) } }
        // One projection per connection at the same time: each index is built by one server process.
        try await withThrowingTaskGroup(of: Void.self) { group in
            for projection in left {
                group.addTask { [self] in try await buildIndexes(of: projection) }
            }
            try await group.waitForAll()
        }
    }

    private func buildIndexes(of projection: any Projection) async throws {
        try await client.withConnection { connection in
            let schema = Self.schemaName(for: projection)
            try projection.createIndexes(in: ProjectionContext(connection: connection, schema: schema, mode: .replay))
            for table in projection.tableNames { try connection.execute("ANALYZE \"\(schema)\".\(table)") }
        }
        indexed.withLock { _ = $0.insert(projection.name) }
    }

    /// Swaps the new tables in, after building their indexes and applying whatever the log gained
    /// since `catchUp`.
    public func swap() async throws {
        try await buildIndexes()
        let projections = self.projections
        let checkpoint = try await replayCheckpoint()
        try await client.withConnection { [self] connection in
            try connection.transaction { connection in
                for projection in projections {
                    _ = try ProjectionState.read(projection.name, on: connection, lock: true)
                }
                var position = checkpoint
                while true {
                    let (count, next) = try self.applyNext(after: position, on: connection)
                    position = next
                    if count < self.batchSize { break }
                }
                for projection in projections {
                    let schema = Self.schemaName(for: projection)
                    let retired = "retired_\(projection.name)"
                    try connection.execute("DROP SCHEMA IF EXISTS \"\(retired)\" CASCADE")
                    try connection.execute("CREATE SCHEMA \"\(retired)\"")
                    for table in projection.tableNames {
                        let live = try connection.query("SELECT to_regclass($1) IS NOT NULL", "public.\(table)").scalar(Bool.self)
                        if live { try connection.execute("ALTER TABLE public.\(table) SET SCHEMA \"\(retired)\"") }
                        try connection.execute("ALTER TABLE \"\(schema)\".\(table) SET SCHEMA public")
                    }
                    try connection.query("DELETE FROM projection_dead_letters WHERE projection = $1", projection.name)
                    try connection.execute(
                        """
                        INSERT INTO projection_dead_letters SELECT * FROM "\(schema)".dead_letters
                        """)
                    try connection.query(
                        """
                        INSERT INTO projection_checkpoints (projection, version, transaction_id, position, events_applied)
                        SELECT projection, version, transaction_id, position, events_applied FROM projection_replays WHERE projection = $1
                        ON CONFLICT (projection) DO UPDATE SET version = excluded.version, transaction_id = excluded.transaction_id,
                            position = excluded.position, events_applied = excluded.events_applied, updated_at = clock_timestamp()
                        """, projection.name)
                    try connection.query("DELETE FROM projection_replays WHERE projection = $1", projection.name)
                }
                // Bell pages kept in memory were read from the tables just retired.
                if projections.contains(where: { $0.name == BellProjection().name }) { try BellChanges.announceEverybody(on: connection) }
                // And conversation lists, from the threads' tables or the shops' members.
                if projections.contains(where: { $0.name == ThreadsProjection().name || $0.name == PeopleProjection().name }) {
                    try ThreadChanges.announceEverything(on: connection)
                }
            }
            for projection in projections {
                try connection.execute("DROP SCHEMA IF EXISTS \"retired_\(projection.name)\" CASCADE")
                try connection.execute("DROP SCHEMA IF EXISTS \"\(Self.schemaName(for: projection))\" CASCADE")
            }
        }
    }

    /// Drops the new tables without swapping.
    public func abandon() async throws {
        let projections = self.projections
        try await client.transaction { connection in
            for projection in projections {
                try connection.execute("DROP SCHEMA IF EXISTS \"\(Self.schemaName(for: projection))\" CASCADE")
                try connection.query("DELETE FROM projection_replays WHERE projection = $1", projection.name)
            }
        }
    }

    /// Where the replay stands (the same for every projection it rebuilds).
    public func replayCheckpoint() async throws -> Checkpoint {
        let names = projections.map(\.name)
        return try await client.withConnection { connection in
            let rows = try connection.query(
                "SELECT transaction_id::text::bigint AS transaction_id, position FROM projection_replays WHERE projection = ANY($1)", names)
            guard rows.count == names.count else {
                throw ProjectionError("No replay is prepared for \(names.joined(separator: ", ")).")
            }
            let checkpoints = try rows.map { row in
                Checkpoint(transactionId: try row.decode(UInt64.self, "transaction_id"), position: try row.decode(Int64.self, "position"))
            }
            guard let first = checkpoints.first, checkpoints.allSatisfy({ $0 == first }) else {
                throw ProjectionError("The replays of \(names.joined(separator: ", ")) stand at different places; prepare them again.")
            }
            return first
        }
    }

    /// Reads one batch after `checkpoint` and applies it to every projection's new tables, with the
    /// replay checkpoints, in the caller's transaction. Returns how many events it read and where it
    /// ended.
    private func applyNext(after checkpoint: Checkpoint, on connection: PostgresConnection) throws -> (Int, Checkpoint) {
        let batch = DecodedBatch(try EventStore.read(after: checkpoint, limit: batchSize, on: connection))
        guard let last = batch.checkpoint else { return (0, checkpoint) }
        for projection in projections { try apply(batch, to: projection, on: connection) }
        return (batch.records.count, last)
    }

    /// Applies a batch to one projection's new tables and moves its replay checkpoint past it.
    private func apply(_ batch: DecodedBatch, to projection: any Projection, on connection: PostgresConnection) throws {
        guard let last = batch.checkpoint else { return }
        let schema = Self.schemaName(for: projection)
        let context = ProjectionContext(connection: connection, schema: schema, mode: .replay)
        try Self.record(try ProjectionBatchApplier.apply(batch, to: projection, in: context), of: projection, through: last, on: connection)
    }

    /// Parks what `outcome` parked in the projection's replay dead letters and moves its replay
    /// checkpoint to `last`, counting what it applied.
    static func record(
        _ outcome: ProjectionBatchApplier.Outcome, of projection: any Projection, through last: Checkpoint, on connection: PostgresConnection
    ) throws {
        try ProjectionBatchApplier.park(outcome.parked, into: "\"\(schemaName(for: projection))\".dead_letters", on: connection)
        try connection.query(
            """
            UPDATE projection_replays SET transaction_id = $2::text::xid8, position = $3, events_applied = events_applied + $4
            WHERE projection = $1
            """, projection.name, Int64(last.transactionId), last.position, Int64(outcome.applied))
    }
}
