import EventLog
import Foundation
import InboxDomain
import PostgresClient

/// The inline driver: appends events and applies them to the live read models in the same
/// transaction, so the person who wrote reads their own change on the next request.
///
/// It applies events exactly as the async projector would apply them next, and moves the
/// projection's checkpoint past them in the same transaction, so the async projector does not apply
/// them again. That is only possible when this transaction is next in the log: no older
/// transaction is still writing (`pg_snapshot_xmin` is this transaction's own id), and the events
/// committed before it are few enough to apply first (at most `catchUpLimit`). Otherwise the
/// projection is left to the async projector, which reaches the events within its poll interval.
///
/// For each projection the driver first locks its checkpoint row, which serializes it with the
/// async projector's batches, other inline writers and a replay's swap.
public struct InlineProjections: Sendable {
    public let projections: [any Projection]
    public let validator: EventValidator?
    /// How many events committed before this transaction an inline apply brings in first.
    public let catchUpLimit: Int
    /// Joins concurrent appends of this driver (and its copies) into one transaction; nil runs each
    /// append in a transaction of its own. See `InlineGroupCommit`.
    public let groupCommit: InlineGroupCommit?

    public init(
        projections: [any Projection] = InboxProjections.all,
        validator: EventValidator? = EventValidator(registry: InboxCatalogue.registry), catchUpLimit: Int = 500,
        groupCommit: InlineGroupCommit? = InlineGroupCommit()
    ) {
        self.projections = projections
        self.validator = validator
        self.catchUpLimit = catchUpLimit
        self.groupCommit = groupCommit
    }

    /// One driver with every projection of `drivers` (each once, in the order they first come),
    /// and the first one's catch-up limit: what a group of requests that came through several
    /// drivers applies (`InlineGroupCommit`).
    static func joining(_ drivers: [InlineProjections]) -> InlineProjections {
        guard let first = drivers.first else { return InlineProjections(groupCommit: nil) }
        if drivers.allSatisfy({ $0.projections.map(\.name) == first.projections.map(\.name) }) { return first }
        var names = Set<String>()
        var projections: [any Projection] = []
        for driver in drivers {
            for projection in driver.projections where names.insert(projection.name).inserted { projections.append(projection) }
        }
        return InlineProjections(projections: projections, validator: first.validator, catchUpLimit: first.catchUpLimit, groupCommit: nil)
    }

    /// What happened to each projection the events concern.
    public struct Outcome: Sendable, Hashable {
        /// Projections that now include the events.
        public var applied: [String] = []
        /// Projections left to the async projector (an older transaction was still writing, the
        /// projection was too far behind, or its live tables are of another version).
        public var deferred: [String] = []
    }

    /// Appends `events` and projects the new ones inline, in one transaction on `connection`.
    /// `also` runs on the connection right after the append, in its transaction (and savepoint):
    /// when it throws, the append is undone and the error is this call's.
    @discardableResult
    public func append(
        _ events: [NewEvent], expectedVersions: [String: ExpectedVersion] = [:], on connection: PostgresConnection,
        also: (@Sendable (PostgresConnection) throws -> Void)? = nil
    ) throws -> [AppendedEvent] {
        try appendReporting(events, expectedVersions: expectedVersions, on: connection, also: also).appended
    }

    /// `append`, saying which projections include the events when it returns.
    ///
    /// Outside a transaction, with `groupCommit` set, the append joins the appends of other threads
    /// that arrive meanwhile in one transaction (one WAL flush for all of them); it returns when
    /// that transaction has committed, with this call's own events, or this call's own error.
    /// Inside a transaction of the caller's, everything runs in that transaction, as before.
    public func appendReporting(
        _ events: [NewEvent], expectedVersions: [String: ExpectedVersion] = [:], on connection: PostgresConnection,
        also: (@Sendable (PostgresConnection) throws -> Void)? = nil
    ) throws -> (appended: [AppendedEvent], outcome: Outcome) {
        let prepared = try EventStore.PreparedAppend(events, expectedVersions: expectedVersions, validator: validator)
        if let groupCommit, !events.isEmpty, !connection.isInTransaction {
            return try groupCommit.run(prepared, also: also, projections: self, leader: .held(connection))
        }
        return try connection.transaction { connection in
            let appended = try prepared.run(on: connection)
            try also?(connection)
            let outcome = try project(
                appended.filter(\.wasAppended).map(\.event), typed: Self.typedPayloads(of: prepared.events, appended: appended), on: connection)
            return (appended, outcome)
        }
    }

    /// `append` on a connection of `client`'s pool, held only as long as needed: with
    /// `groupCommit`, a request that waits for its group holds none (the group's leader takes one
    /// for the group), so as many requests can share a transaction as there are threads waiting,
    /// not connections.
    @discardableResult
    public func append(
        _ events: [NewEvent], expectedVersions: [String: ExpectedVersion] = [:], using client: PostgresClient,
        also: (@Sendable (PostgresConnection) throws -> Void)? = nil
    ) throws -> [AppendedEvent] {
        try appendReporting(events, expectedVersions: expectedVersions, using: client, also: also).appended
    }

    /// `append(_:using:)`, saying which projections include the events when it returns.
    public func appendReporting(
        _ events: [NewEvent], expectedVersions: [String: ExpectedVersion] = [:], using client: PostgresClient,
        also: (@Sendable (PostgresConnection) throws -> Void)? = nil
    ) throws -> (appended: [AppendedEvent], outcome: Outcome) {
        guard let groupCommit, !events.isEmpty else {
            return try client.withConnectionBlocking { connection in
                try appendReporting(events, expectedVersions: expectedVersions, on: connection, also: also)
            }
        }
        let prepared = try EventStore.PreparedAppend(events, expectedVersions: expectedVersions, validator: validator)
        return try groupCommit.run(prepared, also: also, projections: self, leader: .pooled(client))
    }

    /// The part of a group's outcome that concerns `appended`: the projections whose event types
    /// its new events have, as `project` would have reported for them alone.
    func outcome(_ group: Outcome, for appended: [AppendedEvent]) -> Outcome {
        let types = Set(appended.filter(\.wasAppended).map(\.event.type))
        if types.isEmpty { return Outcome() }
        let concerned = Set(projections.filter { !$0.eventTypes.isDisjoint(with: types) }.map(\.name))
        return Outcome(applied: group.applied.filter(concerned.contains), deferred: group.deferred.filter(concerned.contains))
    }

    /// Applies events this open transaction has just appended.
    ///
    /// One round trip locks the checkpoint rows of every projection the events concern (in name
    /// order, the order a replay's swap locks them in), says whether this transaction is next in
    /// the log, reads what each has not applied yet, and (when every one of them is staged) reads
    /// the rows their writes need. Each projection then applies behind a
    /// savepoint of its own (a projection that cannot is rolled back to it and deferred), and the
    /// checkpoints of those that applied are moved with the statement that follows `project`
    /// (`executeWithNext`: the caller's `COMMIT`), in its round trip. Send something after it.
    /// `typed`: the values the events were encoded from, by position (`typedPayloads`), so that
    /// they are not decoded again.
    ///
    /// `writesGoWithNext`: in the common case (`applyStaged`), the writes are held back too and go
    /// with the caller's `COMMIT`, in its round trip. A write that fails then fails that `COMMIT`,
    /// and the transaction is lost: only for a caller that does it all again the careful way when
    /// that happens (`InlineGroupCommit`).
    public func project(
        _ records: [RecordedEvent], typed: [Int64: any EventPayload] = [:], writesGoWithNext: Bool = false, on connection: PostgresConnection
    ) throws -> Outcome {
        var outcome = Outcome()
        if records.isEmpty { return outcome }
        let own = DecodedBatch(records.sorted { $0.checkpoint < $1.checkpoint }, typed: typed)
        guard let last = own.checkpoint else { return outcome }
        let concerned = projections.sorted(by: { $0.name < $1.name }).filter { projection in
            let types = projection.eventTypes
            return own.records.contains(where: { types.contains($0.type) })
        }
        if concerned.isEmpty { return outcome }
        // The staged projections' reads go with the locks, for the common case (nothing pending).
        let context = ProjectionContext(connection: connection, schema: ProjectionState.liveSchema, mode: .inline)
        let staged = Self.staged(concerned, own: own)
        let loads = staged?.map { $0.projection.loads(for: $0.events, in: context) } ?? []
        // The locks behind a savepoint too: when they cannot be had (a statement timeout while a
        // swap holds them, say), every projection is left to the async projector.
        connection.executeWithNext("SAVEPOINT inline_projection_locks")
        let positions: [String: (ProjectionPosition, pending: [RecordedEvent]?)]
        let isNext: Bool
        let loaded: [PostgresRows]
        do {
            (positions, isNext, loaded) = try ProjectionState.readLockedNextAndPending(
                concerned.map(\.name), limit: catchUpLimit, alongside: loads.flatMap { $0 }, on: connection)
            connection.executeWithNext("RELEASE SAVEPOINT inline_projection_locks")
        } catch let error as PostgresError where error.isConnectionError {
            throw error
        } catch {
            try connection.execute("ROLLBACK TO SAVEPOINT inline_projection_locks")
            try connection.execute("RELEASE SAVEPOINT inline_projection_locks")
            outcome.deferred = concerned.map(\.name)
            return outcome
        }
        var advances: [PostgresStatement] = []
        if isNext, let staged,
            let applied = applyStaged(
                staged, loads: loads, loaded: loaded, positions: positions, writesGoWithNext: writesGoWithNext, in: context)
        {
            for (projection, applied) in applied {
                advances.append(ProjectionState.advanceStatement(projection, to: last, applied: applied))
                outcome.applied.append(projection)
            }
            for advance in advances { connection.executeWithNext(advance) }
            return outcome
        }
        for projection in concerned {
            guard isNext, let (live, pending) = positions[projection.name], live.version == projection.version, let pending else {
                outcome.deferred.append(projection.name)
                continue
            }
            // The savepoint and its release go with the statements after them, in one round trip
            // (PostgresConnection.executeWithNext); the rollbacks go at once.
            connection.executeWithNext("SAVEPOINT inline_projection")
            do {
                let applied = try apply([DecodedBatch(pending), own], to: projection, on: connection)
                connection.executeWithNext("RELEASE SAVEPOINT inline_projection")
                advances.append(ProjectionState.advanceStatement(projection.name, to: last, applied: applied))
                outcome.applied.append(projection.name)
            } catch let error as PostgresError where error.isConnectionError {
                throw error
            } catch {
                try connection.execute("ROLLBACK TO SAVEPOINT inline_projection")
                try connection.execute("RELEASE SAVEPOINT inline_projection")
                outcome.deferred.append(projection.name)
            }
        }
        // Updates of rows this transaction holds locked: they fail only when the transaction does,
        // and then so does the statement they go with.
        for advance in advances { connection.executeWithNext(advance) }
        return outcome
    }

    /// The typed values of the events an append wrote, by their position in the log: `appended`
    /// is `events`' answer, one for each, in their order.
    static func typedPayloads(of events: [NewEvent], appended: [AppendedEvent]) -> [Int64: any EventPayload] {
        var typed: [Int64: any EventPayload] = [:]
        for (event, answer) in zip(events, appended) where answer.wasAppended {
            if let value = event.typedPayload { typed[answer.event.position] = value }
        }
        return typed
    }

    /// Every concerned projection with the events of `own` it takes, when all of them are staged
    /// and every event of the transaction is readable; nil otherwise.
    private static func staged(_ concerned: [any Projection], own: DecodedBatch) -> [(projection: any StagedProjection, events: [ProjectedEvent])]? {
        guard own.unreadable.isEmpty else { return nil }
        var staged: [(projection: any StagedProjection, events: [ProjectedEvent])] = []
        for projection in concerned {
            guard let projection = projection as? any StagedProjection else { return nil }
            let types = projection.eventTypes
            staged.append((projection, own.events.filter { types.contains($0.record.type) }))
        }
        return staged
    }

    /// The common case, with the reads already done (`loads`, read with the locks: `loaded`) and
    /// the writes in one round trip for all of them: every concerned projection is staged, at its
    /// version, with nothing committed before this transaction left to apply. Behind one
    /// savepoint; nil (with nothing applied, the savepoint rolled back) when the case is not this
    /// one or anything fails, and the caller applies projection by projection, which defers or
    /// parks exactly as before. With `writesGoWithNext`, the writes are held back for the caller's
    /// next statement instead (no savepoint: a failure there is the transaction's). How many
    /// events each applied, by name.
    private func applyStaged(
        _ staged: [(projection: any StagedProjection, events: [ProjectedEvent])], loads: [[PostgresStatement]], loaded: [PostgresRows],
        positions: [String: (ProjectionPosition, pending: [RecordedEvent]?)], writesGoWithNext: Bool, in context: ProjectionContext
    ) -> [(String, Int)]? {
        for (projection, _) in staged {
            guard let (live, pending) = positions[projection.name], live.version == projection.version, pending?.isEmpty == true else { return nil }
        }
        let connection = context.connection
        if !writesGoWithNext { connection.executeWithNext("SAVEPOINT inline_staged") }
        do {
            var loaded = loaded[...]
            var writes: [PostgresStatement] = []
            for ((projection, events), reads) in zip(staged, loads) {
                writes += try projection.writes(for: events, loaded: Array(loaded.prefix(reads.count)), in: context)
                loaded = loaded.dropFirst(reads.count)
            }
            if writesGoWithNext {
                for write in writes { connection.executeWithNext(write) }
            } else {
                _ = try connection.pipeline(writes)
                connection.executeWithNext("RELEASE SAVEPOINT inline_staged")
            }
            return staged.map { ($0.projection.name, $0.events.count) }
        } catch {
            // Whatever failed (a connection lost too) is met again, and answered, on the way
            // projection by projection. (Held back, nothing was sent yet: a fold that threw.)
            if writesGoWithNext { return nil }
            if connection.isOpen {
                _ = try? connection.execute("ROLLBACK TO SAVEPOINT inline_staged")
                _ = try? connection.execute("RELEASE SAVEPOINT inline_staged")
            }
            return nil
        }
    }

    /// Applies what was committed before this transaction and then its own events to
    /// `projection`; how many events it applied.
    private func apply(_ batches: [DecodedBatch], to projection: any Projection, on connection: PostgresConnection) throws -> Int {
        let context = ProjectionContext(connection: connection, schema: ProjectionState.liveSchema, mode: .inline)
        var applied = 0
        for batch in batches where !batch.records.isEmpty {
            let result = try ProjectionBatchApplier.apply(batch, to: projection, in: context)
            try ProjectionBatchApplier.park(result.parked, into: "projection_dead_letters", on: connection)
            applied += result.applied
        }
        return applied
    }
}
