import EventLog
import Foundation
import InboxDomain
import PostgresClient
import Projections

/// `inbox project`, `inbox replay` and the projection part of `inbox status`.
enum ProjectionCommands {
    /// The projections named by `--projection NAME` flags (all when none is named).
    static func selected(_ arguments: [String], command: String, extraFlags: Set<String> = []) throws -> (projections: [any Projection], flags: Set<String>) {
        var names: [String] = []
        var flags: Set<String> = []
        var index = 0
        while index < arguments.count {
            let argument = arguments[index]
            if argument == "--projection" {
                guard index + 1 < arguments.count else { throw UsageError(description: "--projection needs a name.") }
                names.append(arguments[index + 1])
                index += 2
                continue
            }
            if extraFlags.contains(argument) {
                flags.insert(argument)
                index += 1
                continue
            }
            throw UsageError(description: "inbox \(command) has no argument \"\(argument)\"; `inbox help` lists the flags.")
        }
        if names.isEmpty { return (InboxProjections.all, flags) }
        let projections = try names.map { name -> any Projection in
            guard let projection = InboxProjections.named(name) else {
                let known = InboxProjections.all.map(\.name).joined(separator: ", ")
                throw UsageError(description: "there is no projection \"\(name)\"; the projections are \(known).")
            }
            return projection
        }
        return (projections, flags)
    }

    /// Runs a projector for each projection until the task is cancelled.
    static func project(_ projections: [any Projection], database: Database, configuration: InboxConfiguration, log: Log) async throws {
        let options = Projector.Options(pollInterval: .milliseconds(configuration.pollIntervalMilliseconds))
        try await withThrowingTaskGroup(of: Void.self) { group in
            for projection in projections {
                let name = projection.name
                let projector = Projector(projection: projection, configuration: database.client.configuration.connection, options: options) {
                    report in
                    switch report {
                    case .waitingForLease:
                        log.info("waiting for the lease: another node is projecting", ["projection": name])
                    case .tookLease(let pid):
                        log.info("took the lease", ["projection": name, "backend": "\(pid)"])
                    case .applied(_, let parked, let checkpoint) where parked > 0:
                        log.error("parked events that could not be applied", [
                            "projection": name, "parked": "\(parked)", "checkpoint": "\(checkpoint)",
                        ])
                    case .applied: break
                    case .versionMismatch(let live, let code):
                        log.error(
                            live < code
                                ? "the live tables are of an older version: run `inbox replay --projection \(name)`"
                                : "the live tables are of a newer version than this release: this node waits",
                            ["projection": name, "live": "\(live)", "release": "\(code)"])
                    case .retrying(let reason):
                        log.error("a batch failed and will be tried again", ["projection": name, "error": reason])
                    case .checkpointMoved:
                        // An inline writer or a replay's swap moved it; the projector resumed there.
                        break
                    }
                }
                group.addTask { try await projector.run() }
            }
            try await group.waitForAll()
        }
    }

    /// Rebuilds `projections` beside the live tables and swaps them in, printing progress.
    static func replay(_ projections: [any Projection], swap: Bool, database: Database, log: Log) async throws {
        let replayer = Replayer(client: database.client, projections: projections)
        let lock = try await replayer.lock()
        defer { lock.close() }
        let names = projections.map(\.name).joined(separator: ", ")
        log.info("replaying into new tables beside the live ones", ["projections": names])
        try await replayer.prepare()
        let onTerminal = isatty(STDERR_FILENO) != 0
        let printer = ProgressPrinter(onTerminal: onTerminal)
        try await replayer.catchUp { progress in printer.show(progress) }
        printer.finish()
        if let last = printer.last {
            log.info("replayed the log", [
                "events": "\(last.eventsDone)", "eventsPerSecond": "\(Int(last.eventsPerSecond))",
                "seconds": String(format: "%.1f", Double(last.elapsed.components.seconds) + Double(last.elapsed.components.attoseconds) / 1e18),
            ])
        }
        if swap {
            try await replayer.swap()
            log.info("swapped the new tables in", ["projections": names])
        } else {
            log.info("built the new tables without swapping them in", ["schemas": projections.map(Replayer.schemaName(for:)).joined(separator: ", ")])
        }
    }

    /// Lines about each projection for `inbox status`.
    static func status(database: Database) async throws -> [String] {
        try await database.client.withConnection { connection in
            var lines: [String] = []
            for projection in InboxProjections.all {
                let name = projection.name
                let row = try connection.query(
                    """
                    SELECT c.version, c.position, c.events_applied,
                        (SELECT count(*) FROM events e
                         WHERE (e.transaction_id, e.position) > (c.transaction_id, c.position)) AS behind,
                        (SELECT extract(epoch FROM clock_timestamp() - min(e.recorded_at))::float8 FROM events e
                         WHERE (e.transaction_id, e.position) > (c.transaction_id, c.position)) AS lag_seconds,
                        (SELECT count(*) FROM projection_dead_letters d WHERE d.projection = c.projection) AS parked,
                        (SELECT pid FROM pg_locks l WHERE l.locktype = 'advisory' AND l.granted
                            AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
                            AND l.classid = 6924 AND l.objid = hashtext(c.projection)::oid LIMIT 1) AS holder,
                        (SELECT r.events_applied FROM projection_replays r WHERE r.projection = c.projection) AS replaying,
                        (SELECT r.schema_name FROM projection_replays r WHERE r.projection = c.projection) AS replay_schema
                    FROM projection_checkpoints c WHERE c.projection = $1
                    """, name
                ).first
                guard let row else {
                    lines.append("projection \(name): not started (its tables are created when a projector first runs)")
                    continue
                }
                let version = try row.decode(Int32.self, "version")
                let behind = try row.decode(Int64.self, "behind")
                let parked = try row.decode(Int64.self, "parked")
                let holder = try row.decode(Int32?.self, "holder")
                let replaying = try row.decode(Int64?.self, "replaying")
                let replaySchema = try row.decode(String?.self, "replay_schema")
                var line = "projection \(name): version \(version)"
                if version != projection.version { line += " (this release builds \(projection.version): replay it)" }
                line += ", at position \(try row.decode(Int64.self, "position")), \(behind) event\(behind == 1 ? "" : "s") behind"
                if let lag = try row.decode(Double?.self, "lag_seconds"), behind > 0 {
                    line += String(format: " (the oldest recorded %.1f s ago)", lag)
                }
                line += ", \(parked) parked"
                line += holder.map { ", projected by backend \($0)" } ?? ", no projector running"
                if let replaying, let replaySchema {
                    // A replay that is running, was stopped, or was built with --no-swap: its row stays
                    // until a replay swaps (or `inbox replay` starts again, which drops it).
                    line += ", a replay stands in schema \(replaySchema) (\(replaying) event\(replaying == 1 ? "" : "s") applied, not swapped in)"
                }
                lines.append(line)
            }
            return lines
        }
    }
}

/// Replay progress: a line rewritten in place on a terminal, a line every few seconds otherwise.
final class ProgressPrinter: @unchecked Sendable {
    private let onTerminal: Bool
    private let lock = NSLock()
    private var lastPrinted = ContinuousClock.now - .seconds(60)
    private var printedOnTerminal = false
    private(set) var last: Replayer.Progress?

    init(onTerminal: Bool) { self.onTerminal = onTerminal }

    func show(_ progress: Replayer.Progress) {
        lock.lock()
        defer { lock.unlock() }
        last = progress
        let now = ContinuousClock.now
        let interval: Duration = onTerminal ? .milliseconds(200) : .seconds(5)
        guard now - lastPrinted >= interval else { return }
        lastPrinted = now
        let text = progress.description
        if onTerminal {
            FileHandle.standardError.write(Data("\r\u{1B}[K\(text)".utf8))
            printedOnTerminal = true
        } else {
            FileHandle.standardError.write(Data("\(text)\n".utf8))
        }
    }

    func finish() {
        lock.lock()
        defer { lock.unlock() }
        if printedOnTerminal { FileHandle.standardError.write(Data("\n".utf8)) }
    }
}
