import Foundation
import PostgresClient

/// Where a projection stands, for operators: `inbox status` and `/metrics` read it the same way.
public struct ProjectionHealth: Sendable {
    public var name: String
    /// The version of its live tables.
    public var version: Int
    public var position: Int64
    /// Events after its checkpoint (counted only when asked: it reads the log's index).
    public var eventsBehind: Int64?
    /// The age of the oldest event it has not applied; nil when caught up.
    public var lagSeconds: Double?
    public var parked: Int64
    /// The session holding its lease in this database.
    public var leaseHolder: Int32?
    /// A replay not swapped in: its schema and how many events it has applied.
    public var replay: (schema: String, eventsApplied: Int64)?

    /// Every projection that has live tables, by name.
    public static func read(countingBehind: Bool, on connection: PostgresConnection) throws -> [ProjectionHealth] {
        let behind = countingBehind
            ? "(SELECT count(*) FROM events e WHERE (e.transaction_id, e.position) > (c.transaction_id, c.position))"
            : "NULL::bigint"
        let rows = try connection.query(
            """
            SELECT c.projection, c.version, c.position, \(behind) AS behind,
                (SELECT extract(epoch FROM clock_timestamp() - min(e.recorded_at))::float8 FROM events e
                 WHERE (e.transaction_id, e.position) > (c.transaction_id, c.position)) AS lag_seconds,
                (SELECT count(*) FROM projection_dead_letters d WHERE d.projection = c.projection) AS parked,
                (SELECT pid FROM pg_locks l WHERE l.locktype = 'advisory' AND l.granted
                    AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
                    AND l.classid = $1::int::oid AND l.objid = hashtext(c.projection)::oid LIMIT 1) AS holder,
                r.events_applied AS replaying, r.schema_name AS replay_schema
            FROM projection_checkpoints c LEFT JOIN projection_replays r USING (projection)
            ORDER BY c.projection
            """, ProjectionLease.leaseLockClass)
        return try rows.map { row in
            let replaySchema = try row.decode(String?.self, "replay_schema")
            let replaying = try row.decode(Int64?.self, "replaying")
            return ProjectionHealth(
                name: try row.decode(String.self, "projection"), version: Int(try row.decode(Int32.self, "version")),
                position: try row.decode(Int64.self, "position"), eventsBehind: try row.decode(Int64?.self, "behind"),
                lagSeconds: try row.decode(Double?.self, "lag_seconds"), parked: try row.decode(Int64.self, "parked"),
                leaseHolder: try row.decode(Int32?.self, "holder"),
                replay: replaySchema.map { ($0, replaying ?? 0) })
        }
    }
}
