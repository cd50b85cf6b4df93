import EventLog
import Foundation
import InboxDomain
import PostgresClient

/// The inline driver: appends events and applies them to the live read models in the same
/// transaction, so the person who wrote reads their own change on the next request.
///
/// Inline is a head start, not the record: the async projector applies the same events again when
/// it reaches them, which the projections' idempotence makes harmless, and which is what keeps the
/// live tables equal to a replay. An inline apply that fails is rolled back on its own and left to
/// the async projector (which parks the event if it fails there too); the append still commits.
/// An inline apply locks the projection's checkpoint row, so it never interleaves with a batch of
/// the async projector or a replay's swap.
public struct InlineProjections: Sendable {
    public let projections: [any Projection]
    public let validator: EventValidator?

    public init(projections: [any Projection] = InboxProjections.all, validator: EventValidator? = EventValidator(registry: InboxCatalogue.registry)) {
        self.projections = projections
        self.validator = validator
    }

    /// Appends `events` and projects the new ones inline, in one transaction on `connection`.
    public func append(
        _ events: [NewEvent], expectedVersions: [String: ExpectedVersion] = [:], on connection: PostgresConnection
    ) throws -> [AppendedEvent] {
        try connection.transaction { connection in
            let appended = try EventStore.append(events, expectedVersions: expectedVersions, validator: validator, on: connection)
            try project(appended.filter(\.wasAppended).map(\.event), on: connection)
            return appended
        }
    }

    /// Applies events just appended in the caller's open transaction.
    public func project(_ records: [RecordedEvent], on connection: PostgresConnection) throws {
        if records.isEmpty { return }
        let batch = DecodedBatch(records)
        // In name order, the same order a replay's swap locks them in.
        for projection in projections.sorted(by: { $0.name < $1.name }) {
            let relevant = batch.events.filter { projection.eventTypes.contains($0.record.type) }
            if relevant.isEmpty { continue }
            try connection.execute("SAVEPOINT inline_projection")
            do {
                guard let live = try ProjectionState.read(projection.name, on: connection, lock: true),
                    live.version == projection.version
                else {
                    try connection.execute("RELEASE SAVEPOINT inline_projection")
                    continue
                }
                try projection.apply(
                    relevant, in: ProjectionContext(connection: connection, schema: ProjectionState.liveSchema, mode: .inline))
                try connection.execute("RELEASE SAVEPOINT inline_projection")
            } catch let error as PostgresError where error.isConnectionError {
                throw error
            } catch {
                try connection.execute("ROLLBACK TO SAVEPOINT inline_projection")
                try connection.execute("RELEASE SAVEPOINT inline_projection")
            }
        }
    }
}
