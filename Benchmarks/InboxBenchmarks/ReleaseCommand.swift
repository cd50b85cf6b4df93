import BenchmarkVerdict
import EventLog
import Foundation
import Lifecycle

/// `inbox-bench release`: every benchmark, one after another, each on a fresh embedded PostgreSQL
/// at the scale of `ReleasePlan`, then a verdict against the committed baseline, a report with
/// plots and the JSON. Exit status: 0 when every gated figure is within its margin, 1 when one
/// fell (each named on stdout), 2 for a usage mistake, 3 when a benchmark could not run or the
/// baseline could not be read, 4 when none fell but some could not be judged (run again), 130 when
/// interrupted.
///
/// Gated are only the ratios to a same-run ceiling (the server-side insert, `/healthz`, h2load):
/// the absolute rates are reported beside them, never gated, because the machines are shared.
enum ReleaseCommand {
    struct Options: Equatable {
        var baselinePath = "Benchmarks/baseline.json"
        var reportDirectory = "bench-results/release"
        /// Writes this run's figures as a new baseline there; the verdict is then shown, not enforced.
        var writeBaselinePath: String?
        /// Multiplies every step's scale (a quick look: `--scale 0.05`); the plan's own when 1.
        var scaleFactor = 1.0
        /// Overrides every step's rounds.
        var rounds: Int?
        /// Judges and reports a `release.json` written earlier instead of running (a new
        /// baseline, a changed report).
        var fromPath: String?
        /// Only these benchmarks (the baseline's figures of the others are then not judged).
        var only: [BenchmarkName]?
        /// The baseline's own inbox-bench: after the plan, the gate judges this build against it,
        /// and its answer is the verdict.
        var baselineBinary: String?
        var help = false

        static let usage = """
            usage: inbox-bench release [--baseline PATH] [--baseline-binary PATH] [--report DIR]
                                       [--write-baseline PATH] [--scale X] [--rounds N] [--only NAME,NAME]
                                       [--from RELEASE_JSON]

            Runs every benchmark at the release plan's scale (about 12 minutes on a 2-core machine),
            each on a fresh embedded PostgreSQL, for the report, and compares each ratio to its
            same-run ceiling with the baseline's. With --baseline-binary, the gate (inbox-bench gate)
            then judges this build against the baseline's own, A B A B, and its answer is the
            verdict; without, the comparison with the baseline's figures is.

            options:
              --baseline PATH        the baseline to judge against (default Benchmarks/baseline.json)
              --baseline-binary PATH the baseline's inbox-bench, built from its commit, for the gate
              --report DIR           where index.html, the SVG plots, release.json and each benchmark's
                                     JSON go (default bench-results/release)
              --write-baseline PATH  also write this run's figures as a baseline to PATH; the verdict is
                                     then shown but the exit status is 0 (make bench-baseline)
              --scale X              multiplies every step's scale but schedule's (default 1; a smoke
                                     run: 0.05)
              --rounds N             every step's rounds instead of the plan's (at least 2: the margin
                                     needs a spread)
              --only NAME,NAME       only these benchmarks; the baseline's other figures are not judged
              --from RELEASE_JSON    run nothing: judge the release.json of an earlier run against the
                                     baseline and write its report again
              --help                 this text

            exit status: 0 passed, 1 a gated figure fell below its baseline by more than its margin,
            2 usage, 3 a benchmark failed or the baseline is missing or unreadable, 4 inconclusive
            (none fell, some rounds too far apart to judge: run again), 130 interrupted.

            the plan:
            \(ReleasePlan.steps.map { "  \($0.benchmark.rawValue.padding(toLength: 11, withPad: " ", startingAt: 0)) \($0.summary)" }.joined(separator: "\n"))
            """

        static func parse(_ arguments: [String]) throws(BenchmarkOptionsError) -> Options {
            var options = Options()
            let parsed = try BenchmarkOptionsError.subcommandArguments(
                arguments, command: "release",
                names: ["--baseline", "--baseline-binary", "--report", "--write-baseline", "--scale", "--rounds", "--only", "--from"])
            options.help = parsed.help
            for (name, text) in parsed.values {
                switch name {
                case "--baseline": options.baselinePath = text
                case "--baseline-binary": options.baselineBinary = text
                case "--report": options.reportDirectory = text
                case "--write-baseline": options.writeBaselinePath = text
                case "--from": options.fromPath = text
                case "--scale":
                    guard let scale = Double(text), scale.isFinite, scale > 0, scale <= 10 else {
                        throw BenchmarkOptionsError(description: "release: --scale must be more than 0 and at most 10, not \"\(text)\"")
                    }
                    options.scaleFactor = scale
                case "--rounds":
                    guard let rounds = Int(text), (2...100).contains(rounds) else {
                        throw BenchmarkOptionsError(description: "release: --rounds must be a whole number from 2 to 100, not \"\(text)\"")
                    }
                    options.rounds = rounds
                default:
                    var names: [BenchmarkName] = []
                    for part in text.split(separator: ",") {
                        guard let benchmark = BenchmarkName(rawValue: String(part)) else {
                            throw BenchmarkOptionsError(description: "release: unknown benchmark \"\(part)\" in --only")
                        }
                        names.append(benchmark)
                    }
                    options.only = names
                }
            }
            return options
        }
    }

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
        if let url = ProcessInfo.processInfo.environment["DATABASE_URL"], !url.isEmpty {
            FileHandle.standardError.write(
                Data("inbox-bench: release runs each benchmark on a fresh embedded PostgreSQL, as the baseline was; unset DATABASE_URL\n".utf8))
            return 2
        }
        // The baseline is read first: a run of a quarter of an hour should not end in "no baseline".
        var baseline: Baseline?
        if FileManager.default.fileExists(atPath: options.baselinePath) {
            do {
                baseline = try Baseline.decode(Data(contentsOf: URL(fileURLWithPath: options.baselinePath)))
            } catch {
                FileHandle.standardError.write(Data("inbox-bench: cannot read the baseline \(options.baselinePath): \(error)\n".utf8))
                return 3
            }
        } else if options.writeBaselinePath == nil, options.fromPath == nil {
            FileHandle.standardError.write(
                Data("inbox-bench: no baseline at \(options.baselinePath) (make bench-baseline writes one; see docs/benchmarks.md)\n".utf8))
            return 3
        }

        // Before a quarter of an hour of benchmarks, not after: a baseline's binary without the gate.
        if let binary = options.baselineBinary, options.fromPath == nil {
            do {
                try GateCommand.requireGate(binary)
            } catch {
                FileHandle.standardError.write(Data("inbox-bench: \(error)\n".utf8))
                return 3
            }
        }
        let steps = ReleasePlan.steps.filter { options.only?.contains($0.benchmark) ?? true }.map { step in
            var step = step
            if step.scalesDown { step.scale = (step.scale * options.scaleFactor * 10_000).rounded() / 10_000 }
            step.rounds = options.rounds ?? step.rounds
            return step
        }
        var record: ReleaseRecord
        var failedToRun = false
        if let from = options.fromPath {
            do {
                record = try JSONDecoder().decode(ReleaseRecord.self, from: Data(contentsOf: URL(fileURLWithPath: from)))
            } catch {
                FileHandle.standardError.write(Data("inbox-bench: cannot read the release record \(from): \(error)\n".utf8))
                return 3
            }
        } else {
            // Read before the run: the tree the binary was built from, not one edited meanwhile.
            let commit = ReleaseRecord.currentCommit()
            let gateOptions = options.baselineBinary.map { binary in
                var gate = GateCommand.Options()
                gate.baselineBinary = binary
                gate.jsonPath = "\(options.reportDirectory)/gate.json"
                if let only = options.only { gate.paths = gate.paths.filter { only.contains($0.benchmark) } }
                return gate
            }
            let work = Task { () -> (Outcome, GateCommand.Record?) in
                let outcome = await runSteps(steps)
                guard !outcome.interrupted, let gateOptions else { return (outcome, nil) }
                progress("release: the gate, this build against \(gateOptions.baselineBinary)")
                do {
                    return (outcome, try await GateCommand.gate(gateOptions))
                } catch {
                    var outcome = outcome
                    if error is CancellationError || Task.isCancelled {
                        outcome.interrupted = true
                    } else {
                        outcome.failures["gate"] = "\(error)"
                    }
                    return (outcome, nil)
                }
            }
            let signals = SignalWatcher(signals: [SIGINT, SIGTERM]) { _ in work.cancel() }
            defer { signals.cancel() }
            let (outcome, gate) = await work.value
            if outcome.interrupted {
                FileHandle.standardError.write(Data("inbox-bench: interrupted\n".utf8))
                return 130
            }
            failedToRun = !outcome.failures.isEmpty
            record = ReleaseRecord(
                date: ISO8601DateFormatter().string(from: outcome.started), commit: commit, totalSeconds: outcome.totalSeconds,
                plan: steps.map(\.line), steps: outcome.stepSeconds, failures: outcome.failures, rule: .standard,
                figures: outcome.reports.flatMap(ReleaseFigures.figures(of:)), reports: outcome.reports, gate: gate)
        }
        if var judged = baseline {
            // Only the baseline's figures of the benchmarks this run planned are judged: with
            // --only the others are neither judged nor called missing.
            let planned = Set(record.plan.compactMap { $0.split(separator: ":").first.map(String.init) })
            judged.figures = judged.figures.filter { planned.contains($0.benchmark) }
            record.verdict = ReleaseVerdict.judge(run: record.figures, baseline: judged, rule: record.rule)
            record.baselinePath = options.baselinePath
            record.baselineCommit = judged.commit
            record.baselineDate = judged.date
            record.baselinePlan = judged.plan
        }
        let verdict = record.verdict

        var status: Int32 = 0
        do {
            let written = try ReleaseReport(record: record, baseline: baseline).write(to: options.reportDirectory)
            if let path = options.writeBaselinePath {
                try FileManager.default.createDirectory(
                    at: URL(fileURLWithPath: path).deletingLastPathComponent(), withIntermediateDirectories: true)
                try record.baseline.encoded().write(to: URL(fileURLWithPath: path), options: .atomic)
                print("baseline written: \(path) (commit it with the release)")
            }
            print(record.summary)
            print("\nreport: \(written.html)\nJSON: \(written.json)")
        } catch {
            FileHandle.standardError.write(Data("inbox-bench: cannot write the report: \(error)\n".utf8))
            return 3
        }
        if failedToRun {
            status = 3
        } else if options.writeBaselinePath != nil {
            status = 0
        } else if let gate = record.gate {
            status = gate.status
        } else if let verdict, !verdict.passed {
            status = verdict.failures.isEmpty ? 4 : 1
        }
        return status
    }

    struct Outcome: Sendable {
        var started = Date()
        var reports: [RunReport] = []
        var failures: [String: String] = [:]
        var stepSeconds: [String: Double] = [:]
        var totalSeconds = 0.0
        var interrupted = false
    }

    /// Runs the steps in order, a benchmark that fails is noted and the next one still runs; one
    /// progress line per step: what is done, its headline rate, and the time left, estimated from
    /// the plan's expected times scaled by how the finished steps compared with theirs.
    static func runSteps(_ steps: [ReleasePlan.Step]) async -> Outcome {
        var outcome = Outcome()
        let clock = ContinuousClock()
        let started = clock.now
        var expectedDone = 0.0
        var actualDone = 0.0
        let expectedTotal = steps.map(\.expectedSeconds).reduce(0, +)
        progress("release: \(steps.count) benchmarks, about \(ReleasePlan.format(seconds: expectedTotal)) expected")
        for (index, step) in steps.enumerated() {
            progress("release [\(index + 1)/\(steps.count)] \(step.benchmark.rawValue): \(step.summary)")
            let stepStarted = clock.now
            do {
                let report = try await BenchmarkCommand.measure(step.benchmark, rounds: step.rounds, scale: step.scale)
                outcome.reports.append(report)
                print(report.table + "\n")
            } catch is CancellationError {
                outcome.interrupted = true
                return outcome
            } catch {
                if Task.isCancelled {
                    outcome.interrupted = true
                    return outcome
                }
                outcome.failures[step.benchmark.rawValue] = "\(error)"
                progress("release: \(step.benchmark.rawValue) failed: \(error)")
            }
            let seconds = (clock.now - stepStarted).inSeconds
            outcome.stepSeconds[step.benchmark.rawValue] = seconds
            expectedDone += step.expectedSeconds
            actualDone += seconds
            let remaining = steps.dropFirst(index + 1).map(\.expectedSeconds).reduce(0, +) * (actualDone / max(expectedDone, 1))
            let headline = outcome.reports.last.flatMap { $0.benchmark == step.benchmark.rawValue ? ReleaseFigures.headline(of: $0) : nil } ?? "failed"
            progress(
                "release [\(index + 1)/\(steps.count)] done: \(step.benchmark.rawValue) in \(ReleasePlan.format(seconds: seconds)), \(headline); "
                    + (index + 1 < steps.count ? "about \(ReleasePlan.format(seconds: remaining)) left" : "all done"))
        }
        outcome.totalSeconds = (clock.now - started).inSeconds
        return outcome
    }
}

/// A usage mistake of `inbox-bench release` or `gate`: one line on stderr, exit status 2.
struct BenchmarkOptionsError: Error, Equatable, CustomStringConvertible {
    var description: String

    /// A subcommand's `--name value` and `--name=value` options, in order, and whether `--help`
    /// (or `-h`) was given. A name not in `names`, or one without a value or with an empty one,
    /// is a mistake naming `command`.
    static func subcommandArguments(_ arguments: [String], command: String, names: Set<String>) throws(BenchmarkOptionsError)
        -> (help: Bool, values: [(String, String)])
    {
        var help = false
        var values: [(String, String)] = []
        var index = 0
        while index < arguments.count {
            let argument = arguments[index]
            index += 1
            if argument == "--help" || argument == "-h" {
                help = true
                continue
            }
            var name = argument
            var value: String?
            if let equals = argument.firstIndex(of: "=") {
                name = String(argument[..<equals])
                value = String(argument[argument.index(after: equals)...])
            }
            guard names.contains(name) else {
                throw BenchmarkOptionsError(description: "\(command): unknown argument \(argument) (see inbox-bench \(command) --help)")
            }
            if value == nil {
                guard index < arguments.count else { throw BenchmarkOptionsError(description: "\(command): \(name) needs a value") }
                value = arguments[index]
                index += 1
            }
            guard let text = value, !text.isEmpty else {
                throw BenchmarkOptionsError(description: "\(command): \(name) needs a value, not an empty one")
            }
            values.append((name, text))
        }
        return (help, values)
    }
}

/// What `inbox-bench release` runs: every benchmark of `BenchmarkName`, at a scale that keeps the
/// whole within 20 minutes on the 2-core machine, with enough rounds for a spread. A benchmark
/// added to `BenchmarkName` does not compile until it has a step here.
enum ReleasePlan {
    struct Step: Sendable, Equatable {
        var benchmark: BenchmarkName
        var scale: Double
        var rounds: Int
        /// Measured on the 2-core machine (wall clock, loading included), for the time-left estimate.
        var expectedSeconds: Double
        /// Whether `--scale` shrinks it: `schedule` is short anyway, and below its scale 1 its
        /// tables are so small that PostgreSQL rightly reads one whole, which the benchmark refuses.
        var scalesDown = true

        var summary: String { "scale \(scale), \(rounds) rounds" }
        /// `append: scale 0.5, 5 rounds`: the plan's line in the JSON and the baseline.
        var line: String { "\(benchmark.rawValue): \(summary)" }
    }

    /// Every benchmark but `sealing`, whose figures are ratios of its own rows (docs/benchmarks.md).
    static var steps: [Step] { BenchmarkName.allCases.filter { $0 != .sealing }.map(step) }

    static func step(_ benchmark: BenchmarkName) -> Step {
        switch benchmark {
        // The expected times are the first baseline's (2026-12-01, a busy machine): 11 min 37 s in all.
        case .append: Step(benchmark: .append, scale: 0.5, rounds: 5, expectedSeconds: 99)
        case .projection: Step(benchmark: .projection, scale: 0.3, rounds: 3, expectedSeconds: 145)
        // The disk flush probe row (2026-12-02) adds a round's 10 s to each of the 3 rounds; each wrk
        // row's 3 s warm-up and the WAL segments made before the rounds (2026-12-04) about 45 s.
        case .http: Step(benchmark: .http, scale: 1, rounds: 3, expectedSeconds: 496)
        case .fanout: Step(benchmark: .fanout, scale: 0.3, rounds: 3, expectedSeconds: 31)
        case .schedule: Step(benchmark: .schedule, scale: 1, rounds: 5, expectedSeconds: 8, scalesDown: false)
        case .mail: Step(benchmark: .mail, scale: 0.5, rounds: 3, expectedSeconds: 33)
        // Five rows of 10 s in each of 3 rounds, and a few seconds of loading (estimated, not yet measured in a release run).
        case .identity: Step(benchmark: .identity, scale: 1, rounds: 3, expectedSeconds: 170)
        case .sealing: Step(benchmark: .sealing, scale: 1, rounds: 5, expectedSeconds: 120)
        }
    }

    /// 754 → "12m 34s".
    static func format(seconds: Double) -> String {
        let whole = Int(seconds.rounded())
        return whole >= 60 ? "\(whole / 60)m \(String(format: "%02d", whole % 60))s" : "\(whole)s"
    }
}

/// The release's figures out of the benchmarks' reports.
enum ReleaseFigures {
    static func figures(of report: RunReport) -> [ReleaseFigure] {
        let titles = Dictionary(report.configurations.map { ($0.id, $0.title) }, uniquingKeysWith: { first, _ in first })
        return report.configurations.map { configuration in
            ReleaseFigure(
                id: "\(report.benchmark)/\(configuration.id)", benchmark: report.benchmark, title: configuration.title, unit: report.unit,
                rates: configuration.rounds.map(\.eventsPerSecond), ceiling: configuration.ceilingId.flatMap { titles[$0] },
                ratios: configuration.ratiosPerRound)
        }
    }

    /// The first gated figure (or the first figure) of a report, for the progress line.
    static func headline(of report: RunReport) -> String? {
        let figures = figures(of: report)
        guard let figure = figures.first(where: \.isGated) ?? figures.first else { return nil }
        return "\(figure.title): \(formatGrouped(figure.medianRate)) \(figure.unit)/s"
            + (figure.medianRatio.map { String(format: " (%.2f of the ceiling)", $0) } ?? "")
    }
}

/// Everything a release run produced: `release.json`, and what the report is drawn from.
struct ReleaseRecord: Codable, Sendable {
    var date: String
    var commit: String
    var totalSeconds: Double
    /// One line per benchmark: `append: scale 0.5, 5 rounds`.
    var plan: [String]
    /// Wall-clock seconds of each benchmark, loading included.
    var steps: [String: Double]
    /// The benchmarks that could not run, with their error.
    var failures: [String: String]
    var baselinePath: String?
    var baselineCommit: String?
    var baselineDate: String?
    var baselinePlan: [String]?
    var rule: MarginRule
    /// nil when there was no baseline to judge against.
    var verdict: ReleaseVerdict?
    var figures: [ReleaseFigure]
    var reports: [RunReport]
    /// The gate's pairs and answer, when it ran (`--baseline-binary`): then the verdict.
    var gate: GateCommand.Record?

    var machineLine: String {
        guard let machine = reports.first?.machine else { return "unknown" }
        return "\(machine.activeProcessorCount) cores, \(String(format: "%.1f GiB", Double(machine.physicalMemory) / 1_073_741_824)), "
            + "\(machine.cpuModel ?? "CPU unknown"), \(machine.operatingSystem)"
    }

    var postgresLine: String {
        guard let postgres = reports.first?.postgres else { return "unknown" }
        let settings = postgres.settings.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: ", ")
        return "\(postgres.shortVersion) (\(postgres.embedded ? "embedded" : "DATABASE_URL")): \(settings)"
    }

    var baseline: Baseline {
        Baseline(
            commit: commit, date: date, machine: machineLine, postgres: postgresLine,
            plan: plan, figures: figures)
    }

    /// The verdict for stdout: one line per gated figure, then the answer.
    var summary: String {
        var lines = ["", "release benchmark of \(commit), \(date), \(ReleasePlan.format(seconds: totalSeconds))"]
        for (benchmark, error) in failures.sorted(by: { $0.key < $1.key }) {
            lines.append("FAILED TO RUN \(benchmark): \(error)")
        }
        let gateLines = gate.map { ["", "The comparison above is for the report; the verdict is the gate's:", $0.summary] } ?? []
        guard let verdict else {
            lines.append("no baseline figures to compare with")
            return (lines + gateLines).joined(separator: "\n")
        }
        lines.append("against the baseline of \(baselineCommit ?? "?") (\(baselineDate ?? "?")); \(rule.statement)")
        if let baselinePlan, Set(baselinePlan) != Set(plan) {
            lines.append("note: the baseline was run with another plan (\(baselinePlan.joined(separator: "; "))): ratios may differ for that alone")
        }
        for figure in verdict.figures {
            let label =
                switch figure.outcome {
                case .fell: "FELL   "
                case .missing: "MISSING"
                case .new: "new    "
                case .inconclusive: "UNSURE "
                case .passed: "ok     "
                }
            lines.append("  \(label) \(figure.line)")
        }
        lines.append(
            verdict.passed ? "PASSED: \(verdict.figures.filter { $0.outcome == .passed }.count) gated figures within their margins" : verdict.answer)
        return (lines + gateLines).joined(separator: "\n")
    }

    /// `git rev-parse HEAD`, with `-dirty` when tracked files have changes; "unknown" outside a work tree.
    static func currentCommit() -> String {
        guard let head = try? Subprocess.run("/usr/bin/git", ["rev-parse", "--short=12", "HEAD"]), head.status == 0 else { return "unknown" }
        let commit = head.output.trimmingCharacters(in: .whitespacesAndNewlines)
        let status = try? Subprocess.run("/usr/bin/git", ["status", "--porcelain", "--untracked-files=no"])
        let dirty = status.map { $0.status == 0 && !$0.output.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty } ?? false
        return commit + (dirty ? "-dirty" : "")
    }
}
