import Foundation

/// The command line: `inbox-bench [benchmark] [--rounds N] [--scale X] [--json PATH] [--help]`.
struct Options: Sendable, Equatable {
    var benchmark: BenchmarkName = .append
    /// How many times every configuration runs, interleaved.
    var rounds = 5
    /// Multiplies every configuration's number of events (at least one batch each).
    var scale = 1.0
    /// Where the JSON report goes; `bench-results/<benchmark>.json` when not given.
    var jsonPath: String?
    var help = false

    var resolvedJSONPath: String { jsonPath ?? "bench-results/\(benchmark.rawValue).json" }

    static let usage = """
        usage: inbox-bench [benchmark] [--rounds N] [--scale X] [--json PATH] [--help]
               inbox-bench release [--baseline PATH] [--baseline-binary PATH] [--report DIR] (see release --help)
               inbox-bench gate --baseline-binary PATH [--paths NAME,NAME] (see gate --help)

        benchmarks:
        \(BenchmarkName.allCases.map { "  \($0.rawValue.padding(toLength: 12, withPad: " ", startingAt: 0))\($0.summary)" }.joined(separator: "\n"))
          (the first positional argument; `append` when none is given)
          release     every benchmark for a report, then the gate against the baseline's own build (release --help)
          gate        this build against the baseline's own, A B A B, path by path (gate --help)

        options:
          --rounds N    rounds; each runs every configuration once, interleaved (default 5, 1...1000)
          --scale X     multiplies the events of every configuration (default 1.0, more than 0, at most 100)
          --json PATH   where to write the JSON report (default bench-results/<benchmark>.json)
          --help        this text

        environment:
          DATABASE_URL          benchmark this server (a throwaway database: the event log is append-only)
                                instead of an embedded PostgreSQL in a fresh folder under /tmp
          INBOX_MIGRATIONS_DIR  the sql/ folder with the migrations
          INBOX_BENCH_ONLY      only these configurations (ids of the JSON report), e.g. thread-messages
          INBOX_BENCH_SECONDS   seconds of each wrk row of http and identity (1 to 60, default 10)
        """

    /// A usage mistake: one line on stderr, exit status 2.
    struct UsageError: Error, Equatable, CustomStringConvertible {
        var description: String
    }

    static func parse(_ arguments: [String]) throws(UsageError) -> Options {
        var options = Options()
        var benchmarkGiven = false
        var index = 0
        while index < arguments.count {
            let argument = arguments[index]
            index += 1
            if argument == "--help" || argument == "-h" {
                options.help = true
                continue
            }
            if argument.hasPrefix("-") && argument != "-" {
                // --name value, or --name=value
                let name: String
                var inlineValue: String?
                if let equals = argument.firstIndex(of: "=") {
                    name = String(argument[..<equals])
                    inlineValue = String(argument[argument.index(after: equals)...])
                } else {
                    name = argument
                }
                guard ["--rounds", "--scale", "--json"].contains(name) else {
                    throw UsageError(description: "unknown option \(name) (see --help)")
                }
                let value: String
                if let inlineValue {
                    value = inlineValue
                } else if index < arguments.count {
                    value = arguments[index]
                    index += 1
                } else {
                    throw UsageError(description: "\(name) needs a value (see --help)")
                }
                switch name {
                case "--rounds":
                    guard let rounds = Int(value), (1...1000).contains(rounds) else {
                        throw UsageError(description: "--rounds must be a whole number from 1 to 1000, not \"\(value)\"")
                    }
                    options.rounds = rounds
                case "--scale":
                    guard let scale = Double(value), scale.isFinite, scale > 0, scale <= 100 else {
                        throw UsageError(description: "--scale must be a number more than 0 and at most 100, not \"\(value)\"")
                    }
                    options.scale = scale
                default:
                    guard !value.isEmpty else { throw UsageError(description: "--json needs a path, not an empty value") }
                    options.jsonPath = value
                }
                continue
            }
            guard !benchmarkGiven else {
                throw UsageError(description: "unexpected argument \"\(argument)\" (see --help)")
            }
            guard let benchmark = BenchmarkName(rawValue: argument) else {
                let known = BenchmarkName.allCases.map(\.rawValue).joined(separator: ", ")
                throw UsageError(description: "unknown benchmark \"\(argument)\" (known: \(known))")
            }
            options.benchmark = benchmark
            benchmarkGiven = true
        }
        return options
    }
}
