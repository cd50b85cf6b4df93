import Encodings
import EventLog
import Foundation
import InboxDomain
import Lifecycle
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

    /// Rebuilds `projections` beside the live tables and swaps them in, printing progress.
    static func replay(
        _ projections: [any Projection], swap: Bool, inMemoryEventLimit: Int64, spillDirectory: URL, database: Database, log: Logger
    ) async throws {
        let replayer = Replayer(
            client: database.client, projections: projections, inMemoryEventLimit: inMemoryEventLimit, spillDirectory: spillDirectory)
        let lock = try await replayer.lock()
        defer { lock.close() }
        let names = projections.map(\.name).joined(separator: ", ")
        log.info("replaying into new tables beside the live ones", metadata: ["projections": .string(names)])
        try await replayer.prepare()
        let onTerminal = isatty(STDERR_FILENO) != 0
        let printer = ProgressPrinter(onTerminal: onTerminal)
        try await replayer.catchUp { progress in printer.show(progress) }
        printer.finish()
        if let last = printer.last {
            log.info("replayed the log", metadata: [
                "events": .int(last.eventsDone), "eventsPerSecond": .int(Int(last.eventsPerSecond)),
                "seconds": .number((last.elapsed.inSeconds * 10).rounded() / 10),
            ])
        }
        if swap {
            try await replayer.swap()
            log.info("swapped the new tables in", metadata: ["projections": .string(names)])
        } else {
            log.info("built the new tables without swapping them in", metadata: ["schemas": .string(projections.map(Replayer.schemaName(for:)).joined(separator: ", "))])
        }
    }

    /// Lines about each projection for `inbox status`.
    static func status(database: Database) async throws -> [String] {
        let health = try await database.client.withConnection { connection in
            try ProjectionHealth.read(countingBehind: true, on: connection)
        }
        return InboxProjections.all.map { projection in
            let name = projection.name
            guard let state = health.first(where: { $0.name == name }) else {
                return "projection \(name): not started (its tables are created when a projector first runs)"
            }
            let behind = state.eventsBehind ?? 0
            var line = "projection \(name): version \(state.version)"
            if state.version != projection.version { line += " (this release builds \(projection.version): replay it)" }
            line += ", at position \(state.position), \(behind) event\(behind == 1 ? "" : "s") behind"
            if let lag = state.lagSeconds, behind > 0 { line += String(format: " (the oldest recorded %.1f s ago)", lag) }
            line += ", \(state.parked) parked"
            line += state.leaseHolder.map { ", projected by backend \($0)" } ?? ", no projector running"
            if let replay = state.replay {
                // A replay that is running, was stopped, or was built with --no-swap: its row stays
                // until a replay swaps (or `inbox replay` starts again, which drops it).
                line += ", a replay stands in schema \(replay.schema) (\(replay.eventsApplied) event\(replay.eventsApplied == 1 ? "" : "s") applied, not swapped in)"
            }
            return line
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
        // A stage (the next slice, a projection sent through SQL) is always said.
        guard progress.stage != nil || now - lastPrinted >= interval else { return }
        lastPrinted = now
        let text = progress.description
        if onTerminal {
            // A stage's line stays (the next line starts below it); a rate's is rewritten by the next.
            let staying = progress.stage != nil
            FileHandle.standardError.write(Data("\r\u{1B}[K\(text)\(staying ? "\n" : "")".utf8))
            printedOnTerminal = !staying
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
