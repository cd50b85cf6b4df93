import Foundation
import InboxDomain
import PostgresClient

/// Seals a log whose personal fields were appended in the clear (before sealing was on, or by a
/// node without `INBOX_PERSONAL_DATA_KEY_FILE`): `inbox personal-data seal-log`
/// (docs/event-log.md, "Events from before sealing").
///
/// The log's rows never change, so the log is copied: every event into a new table
/// `events_sealing`, with the same position, transaction id, stream, version, type, metadata,
/// idempotency key and time, and the personal fields of those appended in the clear sealed under
/// their person's key (an erased person's stored erased). The tier goes on meanwhile:
///
/// 1. **Bulk**: chunks of positions, each in a transaction of its own; the events with nothing to
///    seal are copied inside PostgreSQL, the others read, sealed here and written back.
/// 2. **Catching up**: the events of transactions that could still have been open when the last
///    pass started (their id at or above its snapshot's xmin) and not copied yet; until few are left.
/// 3. **The swap**, in one transaction under an `ACCESS EXCLUSIVE` lock on the log (appends and
///    reads wait for it; a lock timeout of 5 s, tried again): the last events are copied, the old
///    table is dropped with its indexes, triggers and sequence, the copy takes its name, its
///    indexes and constraints their names, the sequence its place, and the triggers are made again
///    from their stored definitions. Nothing of the tier depends on the table itself (sql/031); an
///    object that does (a view of the operator's) makes the drop fail, and nothing changes.
///
/// Readers keep their checkpoints: positions and transaction ids are copied. Dropping the old
/// table removes its files, and with them the clear text, from the live database; backups and WAL
/// archives taken before still hold it (docs/event-log.md says what to do with them).
public struct LogSealing: Sendable {
    public struct Outcome: Sendable, Equatable {
        /// Events copied in all.
        public var copied: Int
        /// Events whose personal fields were in the clear and are now sealed (or stored erased).
        public var sealed: Int
        /// Events of a personal type in the clear that are not of their type's shape: copied as
        /// they were (no reader can read them as that type either).
        public var leftAsTheyWere: Int
    }

    let client: PostgresClient
    let keys: PersonalDataKeys
    let chunk: Int64
    let progress: @Sendable (String) -> Void

    public init(client: PostgresClient, keys: PersonalDataKeys, chunk: Int64 = 10_000, progress: @escaping @Sendable (String) -> Void = { _ in }) {
        self.client = client
        self.keys = keys
        self.chunk = chunk
        self.progress = progress
    }

    static let copy = "events_sealing"
    static let columns = "position, transaction_id, stream_id, stream_version, type, schema_version, payload, metadata, idempotency_key, recorded_at"
    /// An event appended with its personal fields in the clear.
    static let inTheClear = "(type = ANY($1::text[]) AND NOT payload ? '$seal')"

    /// How many events of the log hold personal fields in the clear.
    public static func eventsInTheClear(on connection: PostgresConnection) throws -> Int {
        try connection.query(
            "SELECT count(*)::int FROM events WHERE type = ANY($1::text[]) AND NOT payload ? '$seal'", Array(PersonalDataKeys.personalTypes)
        ).scalar(Int.self)
    }

    public func run() async throws -> Outcome {
        try await client.withConnection { connection in try run(on: connection) }
    }

    func run(on connection: PostgresConnection) throws -> Outcome {
        var outcome = Outcome(copied: 0, sealed: 0, leftAsTheyWere: 0)
        guard try Self.eventsInTheClear(on: connection) > 0 else { return outcome }
        // A copy left by a run that stopped is started again: what it holds may be of an older schema.
        _ = try connection.execute("DROP TABLE IF EXISTS \(Self.copy)")
        _ = try connection.execute("CREATE TABLE \(Self.copy) (LIKE events INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING IDENTITY INCLUDING STORAGE)")

        // 1. Bulk, by positions.
        var horizon = try xmin(connection)
        let last = try connection.query("SELECT coalesce(max(position), 0) FROM events").scalar(Int64.self)
        var after: Int64 = 0
        while after < last {
            let upTo = min(last, after + chunk)
            _ = try connection.transaction { connection in
                try copy(where: "position > $2 AND position <= $3", [PostgresBind(after), PostgresBind(upTo)], into: &outcome, on: connection)
            }
            after = upTo
            progress("copied up to position \(upTo) of \(last)")
        }
        // Indexes first: the passes below find what is not copied yet by the position's.
        let indexes = try connection.query(
            "SELECT c.relname::text AS name, pg_get_indexdef(i.indexrelid) AS definition FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indrelid = 'events'::regclass"
        ).map { (name: try $0.decode(String.self, "name"), definition: try $0.decode(String.self, "definition")) }
        for index in indexes {
            _ = try connection.execute(try Self.onCopy(index.definition, name: index.name))
        }

        // 2. Catching up with what committed since, until a pass finds little.
        while true {
            let next = try xmin(connection)
            let found = try connection.transaction { connection in
                try copy(where: Self.notCopiedSince, [PostgresBind(horizon)], into: &outcome, on: connection)
            }
            horizon = next
            progress("caught up \(found) events")
            if found < 1_000 { break }
        }

        // 3. The swap.
        var attempt = 0
        while true {
            attempt += 1
            do {
                try connection.transaction { connection in try swap(horizon: horizon, indexes: indexes, outcome: &outcome, on: connection) }
                break
            } catch let error as PostgresError where error.sqlState == SQLState("55P03") && attempt < 10 {
                // lock_not_available: a long reader held the log; nothing was changed. Again, soon.
                progress("the log was busy (a lock timeout); trying the swap again")
                Thread.sleep(forTimeInterval: 1)
            }
        }
        _ = try connection.execute("ANALYZE events")
        return outcome
    }

    /// The oldest transaction that may still be open: every event of an older one is committed
    /// (or gone) and visible to any statement from now on.
    private func xmin(_ connection: PostgresConnection) throws -> String {
        try connection.query("SELECT pg_snapshot_xmin(pg_current_snapshot())::text").scalar(String.self)
    }

    /// The events not copied yet of transactions at or above `$2` (an xmin): all that can have
    /// committed since a pass that started with it.
    static let notCopiedSince = "transaction_id >= $2::text::xid8 AND NOT EXISTS (SELECT 1 FROM \(copy) s WHERE s.position = events.position)"

    /// Copies the events matching `condition` (over `binds`, from `$2`; `$1` is the personal types)
    /// into the copy: those with nothing in the clear inside PostgreSQL, the others sealed here.
    /// Returns how many.
    @discardableResult
    private func copy(where condition: String, _ binds: [PostgresBind], into outcome: inout Outcome, on connection: PostgresConnection) throws -> Int {
        let binds = [PostgresBind(Array(PersonalDataKeys.personalTypes))] + binds
        let plain = try connection.query(
            "INSERT INTO \(Self.copy) (\(Self.columns)) OVERRIDING SYSTEM VALUE SELECT \(Self.columns) FROM events WHERE \(condition) AND NOT \(Self.inTheClear)",
            binds: binds
        ).affectedRows ?? 0
        let rows = try connection.query(
            "SELECT position, stream_id, type, schema_version, payload::text AS payload FROM events WHERE \(condition) AND \(Self.inTheClear) ORDER BY position",
            binds: binds)
        var positions: [Int64] = []
        var events: [NewEvent] = []
        for row in rows {
            positions.append(try row.decode(Int64.self, "position"))
            events.append(
                NewEvent(
                    streamId: try row.decode(String.self, "stream_id"), type: try row.decode(String.self, "type"),
                    schemaVersion: Int(try row.decode(Int32.self, "schema_version")), payloadJSON: try row.decode(String.self, "payload"),
                    metadata: EventMetadata()))
        }
        if !events.isEmpty {
            let sealed = try keys.sealed(events, on: connection)
            let payloads = zip(events, sealed).map { event, sealed in sealed ?? event.payloadJSON }
            outcome.leftAsTheyWere += sealed.lazy.filter { $0 == nil }.count
            outcome.sealed += sealed.lazy.filter { $0 != nil }.count
            _ = try connection.query(
                """
                INSERT INTO \(Self.copy) (\(Self.columns)) OVERRIDING SYSTEM VALUE
                SELECT e.position, e.transaction_id, e.stream_id, e.stream_version, e.type, e.schema_version, s.payload::jsonb, e.metadata,
                    e.idempotency_key, e.recorded_at
                FROM unnest($1::bigint[], $2::text[]) AS s(position, payload) JOIN events e ON e.position = s.position
                """, positions, payloads)
        }
        outcome.copied += plain + events.count
        return plain + events.count
    }

    /// The last events copied, and the copy put in the log's place, in the caller's transaction.
    private func swap(horizon: String, indexes: [(name: String, definition: String)], outcome: inout Outcome, on connection: PostgresConnection) throws {
        _ = try connection.execute("SET LOCAL lock_timeout = '5s'")
        _ = try connection.execute("LOCK TABLE events IN ACCESS EXCLUSIVE MODE")
        var tail = outcome
        let last = try copy(where: Self.notCopiedSince, [PostgresBind(horizon)], into: &tail, on: connection)
        let count = try connection.query("SELECT (SELECT count(*) FROM events) = (SELECT count(*) FROM \(Self.copy))").scalar(Bool.self)
        guard count else { throw LogSealingError.incompleteCopy }
        progress("the last \(last) events copied under the lock")

        // What is made again from its definition after the old table goes.
        let triggers = try connection.query(
            "SELECT pg_get_triggerdef(oid) FROM pg_trigger WHERE tgrelid = 'events'::regclass AND NOT tgisinternal ORDER BY tgname"
        ).map { try $0.decode(String.self, at: 0) }
        let constraints = try connection.query(
            """
            SELECT conname::text AS name, contype::text AS kind, (SELECT relname::text FROM pg_class WHERE oid = conindid) AS index
            FROM pg_constraint WHERE conrelid = 'events'::regclass AND contype IN ('p', 'u')
            """
        ).map { (name: try $0.decode(String.self, "name"), kind: try $0.decode(String.self, "kind"), index: try $0.decode(String.self, "index")) }
        let comment = try connection.query("SELECT obj_description('events'::regclass, 'pg_class')").first.flatMap { try $0.decode(String?.self, at: 0) }
        let sequence = try connection.query("SELECT pg_get_serial_sequence('events', 'position')").scalar(String.self)
        let lastValue = try connection.query("SELECT last_value FROM \(sequence)").scalar(Int64.self)

        _ = try connection.execute("DROP TABLE events")
        _ = try connection.execute("ALTER TABLE \(Self.copy) RENAME TO events")
        for index in indexes {
            let copied = index.name + "_sealing"
            if let constraint = constraints.first(where: { $0.index == index.name }) {
                _ = try connection.execute(
                    "ALTER TABLE events ADD CONSTRAINT \(Self.quoted(constraint.name)) \(constraint.kind == "p" ? "PRIMARY KEY" : "UNIQUE") USING INDEX \(Self.quoted(copied))")
                if constraint.name != index.name { _ = try connection.execute("ALTER INDEX \(Self.quoted(constraint.name)) RENAME TO \(Self.quoted(index.name))") }
            } else {
                _ = try connection.execute("ALTER INDEX \(Self.quoted(copied)) RENAME TO \(Self.quoted(index.name))")
            }
        }
        let copiedSequence = try connection.query("SELECT pg_get_serial_sequence('events', 'position')").scalar(String.self)
        _ = try connection.query("SELECT setval($1::regclass, $2::bigint, true)", copiedSequence, lastValue)
        if copiedSequence != sequence {
            let bare = sequence.split(separator: ".").last.map(String.init) ?? sequence
            _ = try connection.execute("ALTER SEQUENCE \(copiedSequence) RENAME TO \(bare)")
        }
        for trigger in triggers { _ = try connection.execute(trigger) }
        if let comment { _ = try connection.execute("COMMENT ON TABLE events IS '\(comment.replacingOccurrences(of: "'", with: "''"))'") }
        outcome = tail
    }

    /// `definition` (an index of `events`, as `pg_get_indexdef` writes it) for the copy, named `<name>_sealing`.
    static func onCopy(_ definition: String, name: String) throws -> String {
        for unique in ["CREATE UNIQUE INDEX ", "CREATE INDEX "] {
            let prefix = unique + name + " ON public.events "
            if definition.hasPrefix(prefix) {
                return unique + quoted(name + "_sealing") + " ON public.\(copy) " + definition.dropFirst(prefix.count)
            }
        }
        throw LogSealingError.unexpectedIndex(definition)
    }

    static func quoted(_ identifier: String) -> String { "\"" + identifier.replacingOccurrences(of: "\"", with: "\"\"") + "\"" }
}

public enum LogSealingError: Error, CustomStringConvertible {
    case incompleteCopy
    case unexpectedIndex(String)

    public var description: String {
        switch self {
        case .incompleteCopy: "The sealed copy of the log does not hold every event under the lock; nothing was changed. Run it again."
        case .unexpectedIndex(let definition): "An index of the log has a form this release does not copy: \(definition). Nothing was changed."
        }
    }
}
