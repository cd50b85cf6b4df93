import EventLog
import Foundation
import PostgresClient

/// Where a projection's live tables stand: their version and the checkpoint they reflect.
public struct ProjectionPosition: Sendable, Hashable {
    public var version: Int
    public var checkpoint: Checkpoint
    public var eventsApplied: Int64

    /// At the same checkpoint of the same version (whatever the count of events applied says).
    func isAt(_ other: ProjectionPosition) -> Bool { checkpoint == other.checkpoint && version == other.version }
}

/// The rows of `projection_checkpoints`, and the setup of a projection's live tables.
enum ProjectionState {
    /// The schema the live tables are in; what the API reads.
    static let liveSchema = "public"

    /// Creates the live tables of `projection` if it has none yet, and returns where they stand.
    /// Runs in its own transaction; setups of several nodes are serialized by an advisory lock.
    static func prepareLive(_ projection: any Projection, on connection: PostgresConnection) throws -> ProjectionPosition {
        try connection.transaction { connection in
            try connection.query("SELECT pg_advisory_xact_lock($1, 0)", ProjectionLease.setupLockClass)
            if let position = try read(projection.name, on: connection, lock: false) { return position }
            let context = ProjectionContext(connection: connection, schema: liveSchema, mode: .live)
            try projection.createTables(in: context)
            try projection.createIndexes(in: context)
            try connection.query(
                "INSERT INTO projection_checkpoints (projection, version) VALUES ($1, $2)", projection.name, Int32(projection.version))
            return ProjectionPosition(version: projection.version, checkpoint: .start, eventsApplied: 0)
        }
    }

    /// The checkpoint row, locked for the rest of the transaction when `lock` is set (a batch does
    /// this first: it waits for a swap or another writer and then sees their result).
    static func read(_ name: String, on connection: PostgresConnection, lock: Bool) throws -> ProjectionPosition? {
        try position(try connection.query(readSQL + (lock ? " FOR UPDATE" : ""), name))
    }

    /// For an inline apply, in one round trip (a pipeline, each statement with a snapshot taken
    /// after the one before it finished, so after the locks are held): the rows of the
    /// projections `names`, locked in name order (the order a replay's swap locks them in);
    /// whether this transaction is next in the log (every older one still open belongs to a
    /// session that never appends: `next_in_the_log()`, sql/017); and for each the events
    /// committed after its checkpoint by transactions older than this one when they are at most
    /// `limit`, nil when there are more, read from the row itself (`read_events_before_own`, which
    /// is `EventStore.read(after:limit:on:)` bounded by this transaction's id instead of the
    /// snapshot's xmin: only used when it is next). A longer backlog comes back as one row without
    /// its events: an inline apply then leaves the projection to the projector, and reading the
    /// `limit` + 1 events it would not apply (1.6 to 1.9 ms on a log of 520,000 events, against
    /// 0.5 to 0.8 for the row) cost every write behind a stopped projector, and the client their
    /// decoding. A projection without a row is absent from the answer.
    ///
    /// `alongside` go last in the same pipeline (the reads of an inline apply that will need them
    /// when nothing is pending: they see what was committed before the locks were had), and their
    /// results are returned in their order.
    static func readLockedNextAndPending(
        _ names: [String], limit: Int, alongside: [PostgresStatement] = [], on connection: PostgresConnection
    ) throws -> (positions: [String: (ProjectionPosition, pending: [RecordedEvent]?)], isNext: Bool, alongside: [PostgresRows]) {
        let results = try connection.pipeline([
            PostgresStatement(
                """
                SELECT projection, version, transaction_id::text::bigint AS transaction_id, position, events_applied
                FROM projection_checkpoints WHERE projection = ANY($1) ORDER BY projection FOR UPDATE
                """, names),
            PostgresStatement("SELECT next_in_the_log()"),
            // Planned once: PostgreSQL keeps choosing a custom plan for this statement, which cost
            // 0.2 to 0.4 ms at each bind on the benchmark's machine, for the same plan.
            PostgresStatement("SET LOCAL plan_cache_mode = force_generic_plan"),
            PostgresStatement(
                """
                SELECT c.projection AS inbox_projection, e.* FROM projection_checkpoints c
                CROSS JOIN LATERAL (
                    SELECT r.*, count(*) OVER () > $3 AS inbox_more, row_number() OVER () AS inbox_row
                    FROM read_events_before_own(c.transaction_id, c.position, $2) AS r
                ) AS e
                WHERE c.projection = ANY($1) AND (NOT e.inbox_more OR e.inbox_row = 1)
                ORDER BY c.projection, e.transaction_id, e.position
                """, names, Int32(clamping: limit + 1), Int32(clamping: limit)),
            PostgresStatement("SET LOCAL plan_cache_mode = DEFAULT"),
        ] + alongside)
        var pending: [String: [RecordedEvent]] = [:]
        var beyondLimit: Set<String> = []
        for row in results[3] {
            let name = try row.decode(String.self, "inbox_projection")
            if try row.decode(Bool.self, "inbox_more") {
                beyondLimit.insert(name)
                continue
            }
            pending[name, default: []].append(try RecordedEvent(row: row))
        }
        // Their sealed fields open with the keys of their people, read now.
        if !pending.isEmpty {
            let ring = KeyRing()
            for (name, records) in pending { pending[name] = try PersonalDataKeys.attachKeys(to: records, on: connection, ring: ring) }
        }
        var positions: [String: (ProjectionPosition, pending: [RecordedEvent]?)] = [:]
        for row in results[0] {
            let name = try row.decode(String.self, "projection")
            positions[name] = (try position(row), beyondLimit.contains(name) ? nil : pending[name] ?? [])
        }
        return (positions, try results[1].scalar(Bool.self), Array(results.suffix(alongside.count)))
    }

    /// The checkpoint row as it stands (not locked) and up to `limit` events after `checkpoint`
    /// (`EventStore.read(after:limit:on:)`'s statement), in one round trip: for the async
    /// projector, which learns from the row that an inline writer has moved the checkpoint past
    /// what it would read, without a transaction (a lock taken to find that out holds a
    /// transaction id, and while it lasts no inline writer is next in the log).
    static func readWithEvents(_ name: String, after checkpoint: Checkpoint, limit: Int, on connection: PostgresConnection) throws -> (
        position: ProjectionPosition?, events: [RecordedEvent]
    ) {
        let results = try connection.pipeline([
            PostgresStatement(readSQL, name),
            EventStore.readStatement(after: checkpoint, limit: limit),
        ])
        return (try position(results[0]), try PersonalDataKeys.attachKeys(to: try EventStore.recordedEvents(results[1]), on: connection))
    }

    /// `advance`'s statement, for a caller that sends it with others.
    static func advanceStatement(_ name: String, to checkpoint: Checkpoint, applied: Int) -> PostgresStatement {
        PostgresStatement(advanceSQL, name, Int64(checkpoint.transactionId), checkpoint.position, Int64(applied))
    }

    private static let readSQL = """
        SELECT version, transaction_id::text::bigint AS transaction_id, position, events_applied
        FROM projection_checkpoints WHERE projection = $1
        """

    private static func position(_ rows: PostgresRows) throws -> ProjectionPosition? {
        guard let row = rows.first else { return nil }
        return try position(row)
    }

    private static func position(_ row: PostgresRow) throws -> ProjectionPosition {
        ProjectionPosition(
            version: Int(try row.decode(Int32.self, "version")),
            checkpoint: Checkpoint(transactionId: try row.decode(UInt64.self, "transaction_id"), position: try row.decode(Int64.self, "position")),
            eventsApplied: try row.decode(Int64.self, "events_applied"))
    }

    static func advance(_ name: String, to checkpoint: Checkpoint, applied: Int, on connection: PostgresConnection) throws {
        try connection.query(advanceSQL, name, Int64(checkpoint.transactionId), checkpoint.position, Int64(applied))
    }

    private static let advanceSQL = """
        UPDATE projection_checkpoints
        SET transaction_id = $2::text::xid8, position = $3, events_applied = events_applied + $4, updated_at = clock_timestamp()
        WHERE projection = $1
        """
}

/// The advisory locks of the runtime.
enum ProjectionLease {
    /// The first key of every projection lock (the second is `hashtext(name)`).
    static let leaseLockClass: Int32 = 0x1B0C
    /// Serializes the creation of live tables by several nodes.
    static let setupLockClass: Int32 = 0x1B0D
    /// Held by a replay for each projection it rebuilds (the second key is `hashtext(name)`).
    static let replayLockClass: Int32 = 0x1B0E
}

extension InboxProjections {
    /// Creates the live tables of every projection that has none yet (what the first projector
    /// would do), so that an API node can serve before any projector has run.
    public static func prepareLiveTables(_ projections: [any Projection] = all, client: PostgresClient) async throws {
        for projection in projections {
            _ = try await client.withConnection { connection in try ProjectionState.prepareLive(projection, on: connection) }
        }
    }
}
