import EventLog
import Foundation
import InboxDomain
import PostgresClient
import Synchronization

/// The replay of the projections that fold in memory (`ReplayFold`), in slices of people so that
/// what a replay holds is one slice's state, not the whole log's (`ReplaySliceRouter`).
///
/// One pass over the log (the feed, shared with the projections that replay through SQL) folds the
/// first slice and writes the events of the others to disk (`ReplaySpill`); then each other slice
/// is read back, decoded and folded on its own, and written with COPY. With one slice (a log no
/// longer than a slice) nothing is written to disk. Once a projection's last slice is written, in
/// one transaction, what is made of all its slices' rows (`ReplayFold.finish`), its dead letters
/// and its replay checkpoint; then `completed` (the replayer builds its indexes), while the other
/// projections may still be writing.
///
/// A fold whose slices could disagree with one fold over the whole log (a hazard, see
/// `ReplaySliceRouter`) stops; `run` returns it, and the replayer rebuilds it through SQL.
final class SlicedReplay: @unchecked Sendable {
    /// The replay's data keys (`ReplayFeed.keyRing`).
    private var keyRing: KeyRing?
    final class Member: @unchecked Sendable {
        let projection: any Projection
        let fold: any ReplayFold.Type
        let types: Set<String>
        let bit: UInt8
        var state: ReplayFoldState
        /// The events of its types the pass over the log met (each once, however many slices fold it).
        var relevant = 0
        /// What it could not read, and what its slices already written refused.
        var unreadable: [DeadLetter] = []
        var refused: [DeadLetter] = []
        /// Why this fold cannot be sliced over this log, once it is known.
        var hazard: String?

        init(projection: any Projection, fold: any ReplayFold.Type, bit: UInt8) {
            self.projection = projection
            self.fold = fold
            self.types = projection.eventTypes
            self.bit = bit
            self.state = ReplayFoldState(fold)
        }
    }

    let client: PostgresClient
    let members: [Member]
    let slices: Int
    let batchSize: Int
    let spillDirectory: URL
    private var router: ReplaySliceRouter
    /// The settled rows of the last batch being written (`fold`).
    private var settling: Task<[(member: Member, why: String)], any Error>?

    init(client: PostgresClient, folds: [(any Projection, any ReplayFold.Type)], slices: Int, batchSize: Int, spillDirectory: URL) {
        self.client = client
        members = folds.enumerated().map { Member(projection: $0.element.0, fold: $0.element.1, bit: UInt8(1) << UInt8($0.offset)) }
        self.slices = max(1, slices)
        self.batchSize = batchSize
        self.spillDirectory = spillDirectory
        router = ReplaySliceRouter(count: self.slices)
    }

    /// Replays every member from the feed; returns the members that met a hazard (not recorded),
    /// and the checkpoint the others were recorded at.
    func run(
        from feed: ReplayFeed, report: @Sendable (Int64?) -> Void, progress: @Sendable (String) -> Void,
        completed: @escaping @Sendable (any Projection) async throws -> Void = { _ in }
    ) async throws -> (hazards: [Member], last: Checkpoint?) {
        precondition(members.count <= 8, "a spill record has 8 bits for its folds")
        if slices > 1 {
            for name in ReplaySpill.removeAbandoned(in: spillDirectory) {
                progress("replay: removed \(name) in \(spillDirectory.path), the spill of a replay whose process is gone")
            }
        }
        keyRing = feed.keyRing
        let spill = slices > 1 ? try ReplaySpill(in: spillDirectory, slices: slices) : nil
        defer { spill?.remove() }
        var index = 0
        var last: Checkpoint?
        while true {
            let batch = try await feed.batch(index)
            guard let checkpoint = batch.checkpoint else { break }
            try await takeFirstPass(batch, spill: spill)
            last = checkpoint
            report(await feed.finished(index, events: batch.records.count))
            if batch.records.count < batchSize { break }
            index += 1
        }
        guard let last else { return ([], nil) }
        let end = Ending(checkpoint: last, completed: completed)
        try await writeSlice(ending: spill == nil ? end : nil)
        if let spill {
            try spill.finishWriting()
            for slice in 1..<slices {
                progress("replay: slice \(slice + 1) of \(slices), \(spill.counts[slice] ?? 0) events")
                try await replaySlice(slice, from: spill, ending: slice == slices - 1 ? end : nil)
                spill.remove(slice)
            }
        }
        return (members.filter { $0.hazard != nil }, last)
    }

    /// What follows the last slice's write of each member.
    private struct Ending: Sendable {
        let checkpoint: Checkpoint
        let completed: @Sendable (any Projection) async throws -> Void
    }

    /// What is made of all of `member`'s slices, its dead letters and its replay checkpoint, in one
    /// transaction.
    private func finish(_ member: Member, through last: Checkpoint) async throws {
        try await client.withConnection { connection in
            try connection.transaction { connection in
                let context = ProjectionContext(connection: connection, schema: Replayer.schemaName(for: member.projection), mode: .replay)
                try member.fold.finish(in: context)
                let refused = Self.distinct(member.refused)
                var outcome = ProjectionBatchApplier.Outcome()
                outcome.applied = member.relevant - refused.count
                outcome.parked = member.unreadable + refused
                try Replayer.record(outcome, of: member.projection, through: last, on: connection)
            }
        }
    }

    /// The first pass: the first slice's events folded, the others' spilled.
    private func takeFirstPass(_ batch: DecodedBatch, spill: ReplaySpill?) async throws {
        for member in members where member.hazard == nil {
            member.unreadable += ProjectionBatchApplier.unreadable(batch, projection: member.projection)
        }
        var inputs = [[ProjectedEvent]](repeating: [], count: members.count)
        if let spill {
            try route(batch.events, into: &inputs, spill: spill)
            if let hazard = router.bellHazard {
                for member in members where member.projection is BellProjection { stop(member, hazard) }
            }
        } else {
            for (offset, member) in members.enumerated() where member.hazard == nil {
                inputs[offset] = batch.events.filter { member.types.contains($0.record.type) }
                member.relevant += inputs[offset].count
            }
        }
        try await fold(inputs)
    }

    /// Sends each event to the slices of the folds it is for: the first slice's to `inputs`, the
    /// others' to the spill, once per slice whatever the number of folds it is for there.
    private func route(_ events: [ProjectedEvent], into inputs: inout [[ProjectedEvent]], spill: ReplaySpill) throws {
        var targets: [(slice: Int, mask: UInt8)] = []
        for event in events {
            router.observe(event)
            targets.removeAll(keepingCapacity: true)
            var everywhere: UInt8 = 0
            for member in members where member.hazard == nil && member.types.contains(event.record.type) {
                guard let route = member.fold.route(event, router) else {
                    throw ProjectionError("\(member.projection.name) has no slice for \(event.record.type)")
                }
                switch route {
                case .slice(let slice):
                    if let found = targets.firstIndex(where: { $0.slice == slice }) {
                        targets[found].mask |= member.bit
                    } else {
                        targets.append((slice, member.bit))
                    }
                case .everywhere: everywhere |= member.bit
                case .nowhere: break
                }
            }
            if everywhere != 0 {
                for slice in 0..<slices where !targets.contains(where: { $0.slice == slice }) { targets.append((slice, 0)) }
            }
            for target in targets {
                let mask = target.mask | everywhere
                if target.slice == 0 {
                    for (offset, member) in members.enumerated() where mask & member.bit != 0 { inputs[offset].append(event) }
                } else {
                    try spill.append(event.record, mask: mask, to: target.slice)
                }
            }
            // Counted once, as one fold over the log counts it, however many slices fold it.
            for member in members where member.hazard == nil && member.types.contains(event.record.type) { member.relevant += 1 }
        }
    }

    /// Folds each member's events of one batch at the same time, each on a worker thread, then
    /// starts writing what is settled (messages) while the next batch is folded: one batch's write
    /// in flight at a time, waited for before the next one starts and before a slice is written.
    private func fold(_ inputs: [[ProjectedEvent]]) async throws {
        try await withThrowingTaskGroup(of: Void.self) { group in
            for (offset, member) in members.enumerated() where member.hazard == nil && !inputs[offset].isEmpty {
                let events = inputs[offset]
                group.addTask { try await member.state.apply(events, projection: member.projection) }
            }
            try await group.waitForAll()
        }
        var writes: [(member: Member, schema: String, write: ReplaySettledWrite)] = []
        for member in members where member.hazard == nil {
            if let write = member.state.takeSettled() { writes.append((member, Replayer.schemaName(for: member.projection), write)) }
        }
        try await settled()
        if writes.isEmpty { return }
        settling = Task { [client, slices] in
            var hazards: [(member: Member, why: String)] = []
            for (member, schema, write) in writes {
                do {
                    try await client.withConnection { connection in try write(ProjectionContext(connection: connection, schema: schema, mode: .replay)) }
                } catch let error as PostgresError where slices > 1 && error.isUniqueViolation {
                    hazards.append((member, "a row of two slices has one key: \(error)"))
                }
            }
            return hazards
        }
    }

    /// Waits for the settled rows being written, and stops the folds they found a hazard for.
    private func settled() async throws {
        guard let writing = settling else { return }
        settling = nil
        for (member, why) in try await writing.value { stop(member, why) }
    }

    /// Writes the current slice's rows, each member's on a connection of its own, and starts the
    /// next slice from empty state. After the last slice (`ending`), each member then finishes on
    /// its own, without waiting for the others' writes.
    ///
    /// Not in one transaction: each COPY is its own, and the folds cut their tables into
    /// COPYs of at most `ReplayCopy.rowsPerStatement` rows, because a write transaction holds back
    /// every reader of the log while it is open (gap-safe reads, docs/event-log.md), and a slice's
    /// entries took seconds. A replay that fails is prepared again (its tables dropped), and a fold
    /// that meets a hazard is rebuilt through SQL in new tables, so nothing needs the whole slice
    /// to be one transaction.
    private func writeSlice(ending: Ending?) async throws {
        try await settled()
        try await withThrowingTaskGroup(of: Void.self) { group in
            // Each task touches only its member.
            for member in members where member.hazard == nil {
                group.addTask { [self] in
                    do {
                        try await client.withConnection { connection in
                            try member.state.write(
                                in: ProjectionContext(connection: connection, schema: Replayer.schemaName(for: member.projection), mode: .replay))
                        }
                    } catch let error as PostgresError where slices > 1 && error.isUniqueViolation {
                        member.hazard = "a row of two slices has one key: \(error)"
                    }
                    member.refused += member.state.outcome.parked
                    member.state = ReplayFoldState(member.fold)
                    guard let ending, member.hazard == nil else { return }
                    try await finish(member, through: ending.checkpoint)
                    try await ending.completed(member.projection)
                }
            }
            try await group.waitForAll()
        }
    }

    /// Reads a slice's events back, decodes them (on every core, the next batch while this one is
    /// folded), folds them and writes the slice's rows.
    private func replaySlice(_ slice: Int, from spill: ReplaySpill, ending: Ending?) async throws {
        let reader = try spill.reader(for: slice)
        let limit = batchSize
        let ring = keyRing
        func read() -> Task<[(ProjectedEvent, UInt8)], any Error> {
            // The spill keeps no keys: those the feed read for these events open them.
            Task.detached { try Self.decode(try reader.next(limit).map { record, mask in (Self.withKeys(record, ring), mask) }) }
        }
        var next = read()
        while true {
            let batch = try await next.value
            if batch.isEmpty { break }
            next = read()
            var inputs = [[ProjectedEvent]](repeating: [], count: members.count)
            for (event, mask) in batch {
                for (offset, member) in members.enumerated() where mask & member.bit != 0 { inputs[offset].append(event) }
            }
            if members.allSatisfy({ $0.hazard != nil }) { continue }
            try await fold(inputs)
        }
        try await writeSlice(ending: ending)
    }

    static func withKeys(_ record: RecordedEvent, _ ring: KeyRing?) -> RecordedEvent {
        var record = record
        record.keyRing = ring
        return record
    }

    /// Decodes spilled records as the first pass did (each decoded then, so an error here is not
    /// about the event: the spill is not what was written).
    private static func decode(_ records: [(record: RecordedEvent, mask: UInt8)]) throws -> [(ProjectedEvent, UInt8)] {
        if records.isEmpty { return [] }
        let parts = min(DecodedBatch.cores, max(1, records.count / 1_000))
        let size = (records.count + parts - 1) / parts
        let decoded = Mutex<[Int: Result<[(ProjectedEvent, UInt8)], any Error>]>([:])
        DispatchQueue.concurrentPerform(iterations: parts) { part in
            let range = min(records.count, part * size)..<min(records.count, (part + 1) * size)
            let result = Result { try records[range].map { (try ProjectedEvent.decode($0.record), $0.mask) } }
            decoded.withLock { $0[part] = result }
        }
        let results = decoded.withLock { $0 }
        var events: [(ProjectedEvent, UInt8)] = []
        events.reserveCapacity(records.count)
        for part in 0..<parts {
            guard let result = results[part] else { continue }
            switch result {
            case .success(let part): events += part
            case .failure(let error): throw PostgresError(.clientFailure, "a replay's spilled event no longer decodes: \(error)")
            }
        }
        return events
    }

    private func stop(_ member: Member, _ why: String) {
        guard member.hazard == nil else { return }
        member.hazard = why
        member.state = ReplayFoldState(member.fold)
    }

    /// Each position once (an event folded in several slices and refused in each is one dead letter).
    private static func distinct(_ letters: [DeadLetter]) -> [DeadLetter] {
        var seen = Set<Int64>()
        return letters.filter { seen.insert($0.position).inserted }
    }
}
