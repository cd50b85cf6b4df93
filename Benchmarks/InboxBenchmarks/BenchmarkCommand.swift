import Foundation
import Lifecycle

/// Parses the command line, runs the chosen benchmark on a database, prints the table and writes the JSON.
enum BenchmarkCommand {
    static func run(arguments: [String]) async -> Int32 {
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

        let benchmark = options.benchmark.make(options: options)
        let work = Task {
            try await BenchmarkDatabase.with { database in
                let postgres = try await RunReport.Database.describe(database)
                progress("\(options.benchmark.rawValue): \(options.rounds) rounds, scale \(options.scale), on \(postgres.shortVersion), \(database.description)")
                let date = ISO8601DateFormatter().string(from: Date())
                let result = try await benchmark.run(on: database)
                return RunReport(
                    benchmark: result.benchmark, date: date, rounds: options.rounds, scale: options.scale, machine: .current,
                    postgres: postgres, configurations: result.configurations, notes: result.notes)
            }
        }
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
}
