import Encodings
import EventLog
import Foundation
import InboxDomain
import InboxSimulation
import PostgresClient
import Projections
import Synchronization

/// How fast the read models are built from the log: a replay of all four projections (one read of
/// the log, every batch applied to each), the async projectors catching up from the start (four
/// projectors, each reading the log, as `inbox project` runs them), and beside them their ceiling:
/// the log read out and the read models a replay ends with written in, by COPY alone.
///
/// The log is a simulated marketplace (`MarketplaceSimulation`): mostly messages and read marks,
/// with orders, saved-search matches, security events, preference changes and bell operations,
/// 1,000,000 events over 100,000 people at scale 1. It is loaded with COPY before the rounds.
struct ProjectionBenchmark: Benchmark {
    var rounds: Int
    var scale: Double

    static let events = 1_000_000
    static let people = 100_000
    static let replayBatch = 20_000

    func run(on database: BenchmarkDatabase) async throws -> BenchmarkResult {
        let client = database.client
        let total = max(1_000, Int(Double(Self.events) * scale))
        let people = max(100, Int(Double(Self.people) * scale))
        let existing = try await database.store.headPosition()
        guard existing == 0 else {
            throw BenchmarkFailure(description: "the projection benchmark needs an empty event log; this one has \(existing) events")
        }
        progress("loading \(formatGrouped(Double(total))) simulated events over \(formatGrouped(Double(people))) people with COPY")
        let loadStarted = ContinuousClock.now
        let mix = try await Self.load(events: total, people: people, client: client)
        let loadSeconds = (ContinuousClock.now - loadStarted).inSeconds
        progress("loaded in \(String(format: "%.1f", loadSeconds)) s")

        // The ceiling's rows: the read models a replay of this log produces, read once, untimed.
        let readModels = ReadModelRows()

        let cases = [
            BenchmarkCase(
                id: "replay-all", title: "replay, 4 projections, batch 20,000",
                description:
                    "Replayer.catchUp into new tables beside the live ones: the log read once in batches of 20,000 "
                    + "(gap-safe read, the next batch read while the last is applied), each batch decoded once on both cores; "
                    + "the bell and threads folded in memory and written once with COPY at the end, the preferences and "
                    + "people applied batch by batch through SQL, each on its own connection with its replay checkpoint in "
                    + "the same transaction; then the secondary indexes built. Creating the empty tables is not timed.",
                kind: .client, batchSize: Self.replayBatch, appenders: 1, eventsPerRound: total,
                run: { round in try await Self.replay(client: client, events: total, round: round) }),
            BenchmarkCase(
                id: "catch-up-all", title: "catch-up, 4 async projectors from the start",
                description:
                    "The live tables dropped, then the four async projectors (as `inbox project` runs them, each on its own "
                    + "lease session, reading the log itself in batches of 1,000 and enqueueing notifications) until every "
                    + "checkpoint is at the head. Events of the log per second of wall clock.",
                kind: .client, batchSize: 1_000, appenders: 4, eventsPerRound: total,
                run: { round in try await Self.catchUp(client: client, events: total, round: round) }),
            BenchmarkCase(
                id: "copy-ceiling", title: "COPY the log out, the read models in",
                description:
                    "What a replay cannot avoid, done by PostgreSQL's COPY alone: the whole log read out in the replay's order "
                    + "(COPY TO STDOUT, each row handed to this process and dropped), while the rows the replay's four projections "
                    + "end with (read out of a replay's tables once, before the rounds) are loaded into the same new tables with "
                    + "COPY FROM STDIN, one connection per projection, then their secondary indexes built and their statistics "
                    + "taken as the replay does. Creating the empty tables is not timed. Events of the log per second.",
                kind: .serverSide, batchSize: Self.replayBatch, appenders: 1, eventsPerRound: total,
                run: { round in try await Self.copyCeiling(client: client, events: total, rows: readModels, round: round) }),
        ]
        let configurations = try await runInterleaved(cases, rounds: rounds)
        var notes = mix
        notes["events"] = "\(total)"
        notes["people"] = "\(people)"
        notes["loadSeconds"] = String(format: "%.1f", loadSeconds)
        notes["peakResidentMemoryMiB"] = String(format: "%.0f", max(Self.peakResidentMiB(), Self.peakBeforeResets.withLock { $0 }))
        // Only the catch-up leaves live tables (INBOX_BENCH_ONLY may have skipped it).
        let rows = try await client.withConnection { connection in
            try InboxProjections.all.flatMap(\.tableNames).compactMap { table -> String? in
                guard try connection.query("SELECT to_regclass($1) IS NOT NULL", table).scalar(Bool.self) else { return nil }
                return "\(table)=\(try connection.query("SELECT count(*) FROM \(table)").scalar(Int64.self))"
            }
        }
        notes["liveRowsAfterCatchUp"] = rows.joined(separator: ", ")
        return BenchmarkResult(benchmark: "projection", configurations: configurations, notes: notes)
    }

    /// Generates the events and COPYs them into the log in chunks, each its own transaction. Returns
    /// the mix of event types, as notes.
    static func load(events total: Int, people: Int, client: PostgresClient) async throws -> [String: String] {
        var simulation = MarketplaceSimulation(
            configuration: .init(people: people, shops: max(10, people / 50), watches: max(100, people / 2), seed: 2026))
        var versions: [String: Int64] = [:]
        var counts: [String: Int] = [:]
        var loaded = 0
        let metadata = #"{"origin":"api","service":"simulation"}"#
        while loaded < total {
            let chunk = simulation.events(min(50_000, total - loaded))
            var rows: [[String?]] = []
            rows.reserveCapacity(chunk.count)
            for event in chunk {
                let version = (versions[event.streamId] ?? 0) + 1
                versions[event.streamId] = version
                counts[event.type, default: 0] += 1
                rows.append([event.streamId, String(version), event.type, String(event.schemaVersion), event.payloadJSON, metadata])
            }
            let batch = rows
            _ = try await client.withConnection { connection in
                try connection.transaction { connection in
                    try connection.copyIn(
                        "COPY events (stream_id, stream_version, type, schema_version, payload, metadata) FROM STDIN"
                    ) { writer in
                        for row in batch { try writer.write(row: row) }
                    }
                }
            }
            loaded += chunk.count
            progress("  \(formatGrouped(Double(loaded))) events")
        }
        try await client.execute("ANALYZE events")
        let mix = counts.sorted { $0.value > $1.value }.map { "\($0.key) \(String(format: "%.1f", Double($0.value) * 100 / Double(total)))%" }
        return ["mix": mix.joined(separator: ", "), "streams": "\(versions.count)"]
    }

    /// `INBOX_REPLAY_MEMORY_EVENTS` as `inbox replay` reads it: the events folded in memory at a time.
    static var replayMemoryEvents: Int64 {
        ProcessInfo.processInfo.environment["INBOX_REPLAY_MEMORY_EVENTS"].flatMap { Int64($0) } ?? 2_000_000
    }

    static func replay(client: PostgresClient, events: Int, round: Int) async throws -> Measurement {
        let replayer = Replayer(
            client: client, projections: InboxProjections.all, batchSize: replayBatch, inMemoryEventLimit: replayMemoryEvents)
        try await replayer.prepare()
        let residentBefore = residentMiB(peak: false)
        let peakSoFar = residentMiB(peak: true)
        peakBeforeResets.withLock { $0 = max($0, peakSoFar) }
        resetPeakResident()
        let cpuBefore = try await cpuSeconds(client: client)
        let started = ContinuousClock.now
        try await replayer.catchUp { step in
            // A line per slice, with what the process holds then: a slice's state is let go before the next.
            if let stage = step.stage { progress("  \(stage); resident memory \(String(format: "%.0f", residentMiB(peak: false))) MiB") }
        }
        try await replayer.buildIndexes()
        let elapsed = ContinuousClock.now - started
        try await reportCPU(since: cpuBefore, events: events, what: "replay round \(round)", client: client)
        // The generator's state for the people stays resident from the loading: what the replay
        // itself holds is the peak over that.
        progress(
            "  replay round \(round): \(replayer.slices(forEvents: Int64(events))) slice(s) of at most \(replayMemoryEvents) events; "
                + "resident memory \(String(format: "%.0f", residentBefore)) MiB before, peak "
                + "\(String(format: "%.0f", residentMiB(peak: true))) MiB during")
        try await replayer.abandon()
        return Measurement(round: round, events: events, elapsed: elapsed)
    }

    /// The projectors' options, as `inbox project` has them (`INBOX_REPLAY_MEMORY_EVENTS` too) but for the poll interval;
    /// `INBOX_BENCH_PROJECT_MAX_BATCH` sets the largest batch, to compare sizes side by side.
    static var catchUpOptions: Projector.Options {
        var options = Projector.Options(inMemoryEvents: Int(replayMemoryEvents), pollInterval: .milliseconds(100))
        if let text = ProcessInfo.processInfo.environment["INBOX_BENCH_PROJECT_MAX_BATCH"], let size = Int(text) {
            options.maximumBatchSize = max(options.batchSize, size)
        }
        return options
    }

    /// What the catch-up's projectors stopped with, if any did.
    final class StoppedProjectors: Sendable {
        let failures = Mutex<[String]>([])
    }

    /// The longest a catch-up may go without moving a checkpoint: a projector whose tables are
    /// empty folds up to `INBOX_REPLAY_MEMORY_EVENTS` events (2,000,000) before its first commit,
    /// about three minutes here.
    static let catchUpStall = Duration.seconds(600)

    static func catchUp(client: PostgresClient, events: Int, round: Int) async throws -> Measurement {
        try await client.transaction { connection in
            for table in InboxProjections.all.flatMap(\.tableNames) { try connection.execute("DROP TABLE IF EXISTS public.\(table)") }
            try connection.execute("DELETE FROM projection_checkpoints; DELETE FROM projection_dead_letters; TRUNCATE notification_outbox CASCADE")
        }
        try await client.execute("CHECKPOINT")
        let residentBefore = residentMiB(peak: false)
        peakBeforeResets.withLock { $0 = max($0, residentMiB(peak: true)) }
        resetPeakResident()
        let cpuBefore = try await cpuSeconds(client: client)
        let started = ContinuousClock.now
        let caughtUp = try await project(InboxProjections.all, client: client)
        let elapsed = ContinuousClock.now - started
        try await reportCPU(since: cpuBefore, events: events, what: "catch-up round \(round)", client: client)
        progress(
            "  catch-up round \(round): caught up "
                + caughtUp.sorted { $0.value < $1.value }.map { "\($0.key) \(String(format: "%.1f", $0.value.inSeconds)) s" }.joined(separator: ", "))
        // The projectors whose tables are empty fold up to `catchUpOptions.inMemoryEvents` events
        // in memory before their first commit: what they held is the peak over the generator's state.
        progress(
            "  catch-up round \(round): resident memory \(String(format: "%.0f", residentBefore)) MiB before, peak "
                + "\(String(format: "%.0f", residentMiB(peak: true))) MiB during")
        let parked = try await client.withConnection { connection in
            try connection.query("SELECT count(*) FROM projection_dead_letters").scalar(Int64.self)
        }
        guard parked == 0 else { throw BenchmarkFailure(description: "the catch-up parked \(parked) events") }
        return Measurement(round: round, events: events, elapsed: elapsed)
    }

    /// Runs a `Projector` for each of `projections`, as `inbox project` does, until every one's
    /// checkpoint stands at the log's head; returns when each first did. A projector that stops
    /// (its error is not one it retries) or makes no progress for `catchUpStall` fails the
    /// benchmark, naming it, instead of leaving it waiting for ever.
    static func project(_ projections: [any Projection], client: PostgresClient) async throws -> [String: Duration] {
        let head = try await client.withConnection { connection in
            try connection.query("SELECT transaction_id::text AS x, position FROM events ORDER BY transaction_id DESC, position DESC LIMIT 1")
                .map { "\(try $0.decode(String.self, "x"))/\(try $0.decode(Int64.self, "position"))" }.first ?? ""
        }
        let configuration = client.configuration.connection
        let started = ContinuousClock.now
        let stopped = StoppedProjectors()
        let tasks = projections.map { projection in
            Task {
                do {
                    try await Projector(projection: projection, configuration: configuration, options: catchUpOptions).run()
                } catch is CancellationError {
                } catch {
                    stopped.failures.withLock { $0.append("the \(projection.name) projector stopped: \(error)") }
                }
            }
        }
        defer { for task in tasks { task.cancel() } }
        let names = projections.map(\.name)
        var lastSeen: [String] = []
        var lastMoved = ContinuousClock.now
        // When each projector's checkpoint first stood at the head: which of them the catch-up waited for.
        var caughtUp: [String: Duration] = [:]
        while true {
            try await Task.sleep(for: .milliseconds(20))
            if let failure = stopped.failures.withLock({ $0.first }) {
                throw BenchmarkFailure(description: "the catch-up did not finish: \(failure)")
            }
            let checkpoints = try await client.withConnection { connection in
                try connection.query(
                    "SELECT projection || '=' || transaction_id::text || '/' || position FROM projection_checkpoints WHERE projection = ANY($1) ORDER BY 1",
                    names
                ).map { try $0.decode(String.self, at: 0) }
            }
            for checkpoint in checkpoints where checkpoint.hasSuffix("=" + head) {
                let name = String(checkpoint.prefix { $0 != "=" })
                if caughtUp[name] == nil { caughtUp[name] = ContinuousClock.now - started }
            }
            if checkpoints.count == names.count, checkpoints.allSatisfy({ $0.hasSuffix("=" + head) }) { break }
            if checkpoints != lastSeen {
                (lastSeen, lastMoved) = (checkpoints, ContinuousClock.now)
            } else if ContinuousClock.now - lastMoved > catchUpStall {
                throw BenchmarkFailure(
                    description: "the catch-up did not finish: no checkpoint moved for \(catchUpStall) (\(checkpoints.joined(separator: ", ")); the head is \(head))")
            }
        }
        for task in tasks { task.cancel() }
        for task in tasks { _ = await task.result }
        return caughtUp
    }

    /// The rows of each of the replay's tables after a replay of the whole log, in COPY's text
    /// format, by projection: read once (`copyCeiling`'s first round), untimed.
    final class ReadModelRows: Sendable {
        let tables = Mutex<[String: [(table: String, rows: [UInt8], count: Int)]]?>(nil)
    }

    /// The replay's ceiling: the log read out and the read models written in, by COPY alone, as
    /// `copy-ceiling` describes.
    static func copyCeiling(client: PostgresClient, events: Int, rows readModels: ReadModelRows, round: Int) async throws -> Measurement {
        let replayer = Replayer(
            client: client, projections: InboxProjections.all, batchSize: replayBatch, inMemoryEventLimit: replayMemoryEvents)
        if readModels.tables.withLock({ $0 == nil }) {
            progress("  copy ceiling: a replay first, untimed, for the rows the read models end with")
            try await replayer.prepare()
            try await replayer.catchUp()
            var tables: [String: [(table: String, rows: [UInt8], count: Int)]] = [:]
            for projection in InboxProjections.all {
                let schema = Replayer.schemaName(for: projection)
                tables[projection.name] = try await client.withConnection { connection in
                    try projection.tableNames.map { table in
                        var rows: [UInt8] = []
                        let count = try connection.copyOut("COPY \"\(schema)\".\(table) TO STDOUT") { rows.append(contentsOf: $0) }
                        return (table, rows, count)
                    }
                }
            }
            let summary = tables.values.joined().map { "\($0.table) \($0.count)" }.sorted().joined(separator: ", ")
            progress("  copy ceiling: rows \(summary)")
            readModels.tables.withLock { $0 = tables }
        }
        let tables = readModels.tables.withLock { $0 } ?? [:]
        try await replayer.prepare()
        try await client.execute("CHECKPOINT")
        let cpuBefore = try await cpuSeconds(client: client)
        let started = ContinuousClock.now
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                // The log's rows, whole and in the order the replay reads them (`read_events_after`).
                let read = try await client.withConnection { connection in
                    try connection.copyOut(
                        """
                        COPY (SELECT * FROM events ORDER BY transaction_id, position) TO STDOUT
                        """
                    ) { _ in }
                }
                guard read == events else { throw BenchmarkFailure(description: "the copy ceiling read \(read) events of \(events)") }
            }
            for projection in InboxProjections.all {
                let schema = Replayer.schemaName(for: projection)
                let loads = tables[projection.name] ?? []
                group.addTask {
                    try await client.withConnection { connection in
                        for load in loads {
                            _ = try connection.transaction { connection in
                                try connection.copyIn("COPY \"\(schema)\".\(load.table) FROM STDIN") { writer in
                                    try writer.write(encodedRows: load.rows)
                                }
                            }
                        }
                    }
                }
            }
            try await group.waitForAll()
        }
        try await replayer.buildIndexes()
        let elapsed = ContinuousClock.now - started
        try await reportCPU(since: cpuBefore, events: events, what: "copy ceiling round \(round)", client: client)
        try await replayer.abandon()
        return Measurement(round: round, events: events, elapsed: elapsed)
    }

    /// CPU seconds used so far by this process and by the PostgreSQL server (its postmaster and
    /// backends): figures the machine's other load hardly moves, unlike a rate.
    static func cpuSeconds(client: PostgresClient) async throws -> (client: Double, server: Double) {
        let postmaster = try await client.withConnection { connection in
            ProcessCPU.parent(of: Int32(try connection.query("SELECT pg_backend_pid()").scalar(Int.self)))
        }
        return (ProcessCPU.seconds(of: getpid()), postmaster.map { ProcessCPU.seconds(of: $0, children: true) } ?? 0)
    }

    /// Prints the CPU a round used per event, client and server.
    static func reportCPU(since before: (client: Double, server: Double), events: Int, what: String, client: PostgresClient) async throws {
        let now = try await cpuSeconds(client: client)
        let perEvent = { (seconds: Double) in String(format: "%.1f", seconds * 1_000_000 / Double(max(1, events))) }
        progress(
            "  \(what): CPU \(String(format: "%.1f", now.client - before.client)) s in this process "
                + "(\(perEvent(now.client - before.client)) µs an event), \(String(format: "%.1f", now.server - before.server)) s in "
                + "PostgreSQL (\(perEvent(now.server - before.server)) µs an event)")
    }

    /// The resident set now, or its peak since `resetPeakResident()` (Linux's VmRSS and VmHWM), in MiB.
    static func residentMiB(peak: Bool) -> Double {
        guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8) else { return 0 }
        let key = peak ? "VmHWM:" : "VmRSS:"
        guard let line = status.split(separator: "\n").first(where: { $0.hasPrefix(key) }),
            let kib = Double(line.dropFirst(key.count).split(whereSeparator: { $0 == " " || $0 == "\t" }).first ?? "")
        else { return 0 }
        return kib / 1024
    }

    /// The process's peak before the replay rounds started theirs again.
    static let peakBeforeResets = Mutex<Double>(0)

    /// Starts the resident set's peak again from the current resident set (Linux: `clear_refs` 5).
    static func resetPeakResident() {
        try? "5".write(toFile: "/proc/self/clear_refs", atomically: false, encoding: .utf8)
    }

    /// The most memory this process has held (the resident set's peak), in MiB.
    static func peakResidentMiB() -> Double {
        var usage = rusage()
        getrusage(RUSAGE_SELF.rawValue, &usage)
        return Double(usage.ru_maxrss) / 1024
    }
}
