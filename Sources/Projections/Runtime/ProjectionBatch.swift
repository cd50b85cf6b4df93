import EventLog
import Foundation
import InboxDomain
import PostgresClient
import Synchronization

/// An event a projection could not read or apply: parked with its error, counted, never retried.
public struct DeadLetter: Sendable, Hashable {
    public var projection: String
    public var position: Int64
    public var transactionId: UInt64
    public var type: String
    public var schemaVersion: Int
    public var error: String
}

/// A batch of the log decoded once, for every projection that reads it.
public struct DecodedBatch: Sendable {
    public let records: [RecordedEvent]
    public let events: [ProjectedEvent]
    /// Events this release cannot read (a type or schema version from a newer release, or a stored
    /// payload that does not decode), with the reason.
    public let unreadable: [(record: RecordedEvent, error: String)]

    /// Decodes `records`; with `types`, only those of these types (and those of types this release
    /// does not know, which are parked), for a reader that needs no others.
    ///
    /// `typed` holds, by position, the values that events appended by this process were encoded
    /// from (`NewEvent.typedPayload`); such a record takes its value instead of decoding its text again,
    /// when the value is what decoding would give (`EventTypeRegistry.isCurrent`).
    public init(
        _ records: [RecordedEvent], types: Set<String>? = nil, registry: EventTypeRegistry = InboxCatalogue.registry,
        typed: [Int64: any EventPayload] = [:]
    ) {
        self.records = records
        var events: [ProjectedEvent] = []
        events.reserveCapacity(records.count)
        var unreadable: [(RecordedEvent, String)] = []
        for record in records {
            if let types, !types.contains(record.type), registry.isKnown(record.type) { continue }
            if let value = typed[record.position], registry.isCurrent(value, as: record.type, schemaVersion: record.schemaVersion),
                let event = value as? any CatalogueEvent
            {
                events.append(ProjectedEvent(record: record, payload: event))
                continue
            }
            do {
                events.append(try ProjectedEvent.decode(record, registry: registry))
            } catch {
                unreadable.append((record, "\(error)"))
            }
        }
        self.events = events
        self.unreadable = unreadable
    }

    /// Read once: Foundation reads the cgroup's CPU quota from files at every call (9 µs).
    static let cores = ProcessInfo.processInfo.activeProcessorCount

    /// Decodes `records` on every core: the decoding is most of a replay's client time. With
    /// `types`, as `init(_:types:)`.
    public init(decodingInParallel records: [RecordedEvent], types: Set<String>? = nil, registry: EventTypeRegistry = InboxCatalogue.registry) {
        let parts = min(DecodedBatch.cores, max(1, records.count / 1_000))
        if parts <= 1 {
            self.init(records, types: types, registry: registry)
            return
        }
        let decoded = Mutex<[Int: DecodedBatch]>([:])
        let size = (records.count + parts - 1) / parts
        DispatchQueue.concurrentPerform(iterations: parts) { part in
            let slice = Array(records[min(records.count, part * size)..<min(records.count, (part + 1) * size)])
            let batch = DecodedBatch(slice, types: types, registry: registry)
            decoded.withLock { $0[part] = batch }
        }
        let batches = decoded.withLock { parts in parts.sorted { $0.key < $1.key }.map(\.value) }
        self.init(records: records, events: batches.flatMap(\.events), unreadable: batches.flatMap(\.unreadable))
    }

    private init(records: [RecordedEvent], events: [ProjectedEvent], unreadable: [(record: RecordedEvent, error: String)]) {
        self.records = records
        self.events = events
        self.unreadable = unreadable
    }

    /// Where a reader resumes after this batch.
    public var checkpoint: Checkpoint? { records.last?.checkpoint }
}

/// Applies a decoded batch to one projection inside the caller's transaction. A batch that fails
/// as a whole is applied again event by event, each behind a savepoint, so that only the events
/// that fail on their own are parked and the rest are applied.
enum ProjectionBatchApplier {
    struct Outcome {
        var applied = 0
        var parked: [DeadLetter] = []
    }

    static func apply(_ batch: DecodedBatch, to projection: any Projection, in context: ProjectionContext) throws -> Outcome {
        var outcome = Outcome()
        let types = projection.eventTypes
        for (record, error) in batch.unreadable {
            // A type this release does not know may belong to any projection of a newer release.
            if !InboxCatalogue.isKnown(record.type) || types.contains(record.type) {
                outcome.parked.append(deadLetter(record, projection: projection, error: error))
            }
        }
        let relevant = batch.events.filter { types.contains($0.record.type) }
        if relevant.isEmpty { return outcome }
        let connection = context.connection
        // Both go with the statements after them (PostgresConnection.executeWithNext).
        connection.executeWithNext("SAVEPOINT projection_batch")
        do {
            try projection.apply(relevant, in: context)
            connection.executeWithNext("RELEASE SAVEPOINT projection_batch")
            outcome.applied = relevant.count
            return outcome
        } catch {
            // A failure that is not about the events (a lost connection, a deadlock, a full disk)
            // fails the whole batch, to be tried again; nothing is parked for it.
            guard isAboutTheEvents(error) else { throw error }
            try connection.execute("ROLLBACK TO SAVEPOINT projection_batch")
        }
        for event in relevant {
            try connection.execute("SAVEPOINT projection_event")
            do {
                try projection.apply([event], in: context)
                try connection.execute("RELEASE SAVEPOINT projection_event")
                outcome.applied += 1
            } catch {
                guard isAboutTheEvents(error) else { throw error }
                try connection.execute("ROLLBACK TO SAVEPOINT projection_event")
                outcome.parked.append(deadLetter(event.record, projection: projection, error: "\(error)"))
            }
        }
        try connection.execute("RELEASE SAVEPOINT projection_batch")
        return outcome
    }

    /// Whether an apply's failure comes from the events themselves and would fail again: the
    /// projection refused them, or the database refused the data they make (data exceptions, class
    /// 22, and integrity violations, class 23). Anything else is the system's, not the event's.
    static func isAboutTheEvents(_ error: any Error) -> Bool {
        if error is ProjectionError || error is EventDecodingError { return true }
        guard let error = error as? PostgresError else { return false }
        guard let state = error.sqlState else { return false }
        return state.class == .dataException || state.class == .integrityConstraintViolation
    }

    static func deadLetter(_ record: RecordedEvent, projection: any Projection, error: String) -> DeadLetter {
        DeadLetter(
            projection: projection.name, position: record.position, transactionId: record.transactionId, type: record.type,
            schemaVersion: record.schemaVersion, error: error)
    }

    /// Parks dead letters in `table` (the live `projection_dead_letters`, or a replay's own).
    static func park(_ letters: [DeadLetter], into table: String, on connection: PostgresConnection) throws {
        if letters.isEmpty { return }
        try connection.query(
            """
            INSERT INTO \(table) (projection, position, transaction_id, type, schema_version, error)
            SELECT p, pos, x::text::xid8, t, v, e
            FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::text[], $5::int[], $6::text[]) AS u(p, pos, x, t, v, e)
            ON CONFLICT (projection, position) DO UPDATE SET error = excluded.error, parked_at = clock_timestamp()
            """,
            letters.map(\.projection), letters.map(\.position), letters.map { Int64($0.transactionId) },
            letters.map(\.type), letters.map { Int32($0.schemaVersion) }, letters.map(\.error))
    }
}
