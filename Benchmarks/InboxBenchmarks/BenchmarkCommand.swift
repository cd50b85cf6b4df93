import Foundation
import Lifecycle

/// Parses the command line, runs the chosen benchmark on a database, prints the table and writes the JSON.
enum BenchmarkCommand {
    static func run(arguments: [String]) async -> Int32 {
        if arguments.first == "release" {
            return await ReleaseCommand.run(arguments: Array(arguments.dropFirst()))
        }
        if arguments.first == "gate" {
            return await GateCommand.run(arguments: Array(arguments.dropFirst()))
        }
        let options: Options
        do {
            options = try Options.parse(arguments)
        } catch {
            FileHandle.standardError.write(Data("inbox-bench: \(error.description)\n".utf8))
            return 2
        }
        if options.help {
            print(Options.usage)
            return 0
        }

        let work = Task { try await measure(options.benchmark, rounds: options.rounds, scale: options.scale) }
        // Ctrl-C or SIGTERM cancels the run; the embedded PostgreSQL is then still stopped and deleted.
        let signals = SignalWatcher(signals: [SIGINT, SIGTERM]) { _ in work.cancel() }
        defer { signals.cancel() }

        let report: RunReport
        do {
            report = try await work.value
        } catch is CancellationError {
            FileHandle.standardError.write(Data("inbox-bench: interrupted\n".utf8))
            return 130
        } catch {
            FileHandle.standardError.write(Data("inbox-bench: \(error)\n".utf8))
            return 1
        }
        print(report.table)
        do {
            try report.writeJSON(to: options.resolvedJSONPath)
        } catch {
            FileHandle.standardError.write(Data("inbox-bench: cannot write \(options.resolvedJSONPath): \(error)\n".utf8))
            return 1
        }
        print("\nJSON: \(options.resolvedJSONPath)")
        return 0
    }

    /// Runs one benchmark on a database of its own (a fresh embedded PostgreSQL, or `DATABASE_URL`).
    static func measure(_ name: BenchmarkName, rounds: Int, scale: Double) async throws -> RunReport {
        var options = Options()
        options.benchmark = name
        options.rounds = rounds
        options.scale = scale
        let benchmark = name.make(options: options)
        return try await BenchmarkDatabase.with { database in
            let postgres = try await RunReport.Database.describe(database)
            progress("\(name.rawValue): \(rounds) rounds, scale \(scale), on \(postgres.shortVersion), \(database.description)")
            let date = ISO8601DateFormatter().string(from: Date())
            let result = try await benchmark.run(on: database)
            return RunReport(
                benchmark: result.benchmark, unit: name.unit, date: date, rounds: rounds, scale: scale, machine: .current,
                postgres: postgres, configurations: result.configurations, notes: result.notes)
        }
    }
}
