import BenchmarkVerdict
import EventLog
import Foundation
import Lifecycle
import PostgresClient

/// `inbox-bench gate`: the release's verdict, candidate against the baseline's own binary, A B A B.
///
/// For each group of paths (one benchmark), one process of each build loads its data on its own
/// embedded PostgreSQL, then the two measure a short round in turn, the order swapped every pair
/// (A B, B A, ...), so that each pair saw the same minute of a shared machine. Each pair's ratio,
/// candidate ÷ baseline, is judged by `PairedRule.standard`: a path fell, passed, or could not be
/// judged (run again). Pairs are added, up to `--max-pairs`, while a path of the group is
/// inconclusive.
enum GateCommand {
    /// A path the gate judges: one configuration of one benchmark, measured as its rate.
    struct Path: Sendable, Equatable {
        var name: String
        var benchmark: BenchmarkName
        var configuration: String
    }

    /// The ten paths, by the names `INBOX_PLANTED_SLOWDOWN` uses (`PlantedPath`).
    static let paths: [Path] = [
        Path(name: "append", benchmark: .append, configuration: "client-batch-100"),
        Path(name: "replay", benchmark: .projection, configuration: "replay-all"),
        Path(name: "catch-up", benchmark: .projection, configuration: "catch-up-all"),
        Path(name: "bell-page", benchmark: .http, configuration: "bell-page"),
        Path(name: "conversation-list", benchmark: .http, configuration: "conversations-buyer"),
        Path(name: "thread-messages", benchmark: .http, configuration: "thread-messages"),
        Path(name: "posting", benchmark: .http, configuration: "message-post"),
        Path(name: "fan-out", benchmark: .fanout, configuration: "fanout-2x500"),
        Path(name: "mail", benchmark: .mail, configuration: "mail-smtp"),
        Path(name: "refresh", benchmark: .identity, configuration: "refresh"),
    ]

    /// Each benchmark's short round: a scale at which a round takes about a second, and for the
    /// wrk rows 2 s (after their 3 s warm-up before the first round).
    static func settings(_ benchmark: BenchmarkName) -> (scale: Double, seconds: Int?) {
        switch benchmark {
        case .append: (0.3, nil)
        case .projection: (0.05, nil)
        case .http: (0.25, 2)
        case .fanout: (0.3, nil)
        case .mail: (0.3, nil)
        case .identity: (1, 2)
        case .schedule, .sealing: (1, nil)
        }
    }

    struct Options: Equatable, Sendable {
        var baselineBinary = ""
        /// This very binary, by its path (the JSON names it).
        var candidateBinary = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? "/proc/self/exe"
        var paths = GateCommand.paths
        var pairs = 8
        var maxPairs = 16
        var jsonPath = "bench-results/gate.json"
        var help = false

        static let usage = """
            usage: inbox-bench gate --baseline-binary PATH [--candidate-binary PATH] [--paths NAME,NAME]
                                    [--pairs N] [--max-pairs N] [--json PATH]

            Judges the candidate (this binary, or --candidate-binary) against the baseline's own
            inbox-bench, built from the baseline's commit: per path, the two measure short rounds in
            turn, A B then B A, and each pair's ratio is judged (\(PairedRule.standard.statement)).

            options:
              --baseline-binary PATH   the baseline's inbox-bench (make bench-gate builds it)
              --candidate-binary PATH  the candidate's inbox-bench (default: this one)
              --paths NAME,NAME        only these paths (default all: \(GateCommand.paths.map(\.name).joined(separator: ", ")))
              --pairs N                pairs before the first judgement (default 8, at least 6)
              --max-pairs N            pairs at most, added 4 at a time while a path is inconclusive (default 16)
              --json PATH              where the pairs and the verdict go (default bench-results/gate.json)

            exit status: 0 passed, 1 a path fell, 2 usage, 3 a benchmark failed, 4 inconclusive
            (run again), 130 interrupted. Each process's log: beside the JSON, gate-<path>-<build>.log.
            """

        static func parse(_ arguments: [String]) throws(BenchmarkOptionsError) -> Options {
            var options = Options()
            let parsed = try BenchmarkOptionsError.subcommandArguments(
                arguments, command: "gate", names: ["--baseline-binary", "--candidate-binary", "--paths", "--pairs", "--max-pairs", "--json"])
            options.help = parsed.help
            for (name, text) in parsed.values {
                switch name {
                case "--baseline-binary": options.baselineBinary = text
                case "--candidate-binary": options.candidateBinary = text
                case "--json": options.jsonPath = text
                case "--pairs", "--max-pairs":
                    guard let count = Int(text), (6...100).contains(count) else {
                        throw BenchmarkOptionsError(description: "gate: \(name) must be a whole number from 6 to 100, not \"\(text)\"")
                    }
                    if name == "--pairs" { options.pairs = count } else { options.maxPairs = count }
                default:
                    var chosen: [Path] = []
                    for part in text.split(separator: ",") {
                        guard let path = GateCommand.paths.first(where: { $0.name == part }) else {
                            throw BenchmarkOptionsError(
                                description: "gate: unknown path \"\(part)\" (known: \(GateCommand.paths.map(\.name).joined(separator: ", ")))")
                        }
                        chosen.append(path)
                    }
                    options.paths = chosen
                }
            }
            guard options.help || !options.baselineBinary.isEmpty else {
                throw BenchmarkOptionsError(description: "gate: --baseline-binary is required (the baseline's inbox-bench; make bench-gate builds it)")
            }
            options.maxPairs = max(options.maxPairs, options.pairs)
            return options
        }
    }

    /// One path's pairs and judgement, for the JSON and the summary.
    struct PathResult: Codable, Sendable {
        var path: String
        var benchmark: String
        var configuration: String
        var candidateRates: [Double]
        var baselineRates: [Double]
        var judgement: PairedJudgement

        /// `0.912 to 1.034`: the median's confidence interval; nil with too few pairs.
        var interval: String? {
            judgement.low.flatMap { low in judgement.high.map { String(format: "%.3f to %.3f", low, $0) } }
        }

        var line: String {
            let median = judgement.median.map { String(format: "%.3f", $0) } ?? "?"
            let interval = interval ?? "no interval"
            let label =
                switch judgement.outcome {
                case .passed: "ok     "
                case .fell: "FELL   "
                case .inconclusive: "UNSURE "
                }
            return "  \(label) \(path.padding(toLength: 18, withPad: " ", startingAt: 0)) candidate ÷ baseline \(median) (\(interval)), \(judgement.ratios.count) pairs"
        }
    }

    struct Record: Codable, Sendable {
        var date: String
        var candidate: String
        var baseline: String
        var rule: PairedRule
        var seconds: Double
        var results: [PathResult]
        var failures: [String: String]

        /// 0 passed, 1 a path fell, 3 a path could not be measured, 4 inconclusive.
        var status: Int32 {
            !failures.isEmpty ? 3 : results.contains { $0.judgement.outcome == .fell } ? 1 : results.contains { $0.judgement.outcome == .inconclusive } ? 4 : 0
        }

        var answer: String {
            switch status {
            case 0: "PASSED: \(results.count) paths judged, none fell"
            case 1: "FELL: \(results.filter { $0.judgement.outcome == .fell }.map(\.path).joined(separator: ", "))"
            case 4: "INCONCLUSIVE, run again: \(results.filter { $0.judgement.outcome == .inconclusive }.map(\.path).joined(separator: ", ")) could not be judged"
            default: "FAILED TO RUN: \(failures.keys.sorted().joined(separator: ", "))"
            }
        }

        var summary: String {
            var lines = ["", "gate, \(String(format: "%.0f", seconds)) s: \(rule.statement)"]
            lines += results.map(\.line)
            lines += failures.sorted { $0.key < $1.key }.map { "  FAILED  \($0.key): \($0.value)" }
            lines.append(answer)
            return lines.joined(separator: "\n")
        }

        func write(to path: String) throws {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
            try encoder.encode(self).write(to: URL(fileURLWithPath: path), options: .atomic)
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
        for binary in [options.baselineBinary, options.candidateBinary] where !FileManager.default.isExecutableFile(atPath: binary) {
            FileHandle.standardError.write(Data("inbox-bench: gate: \(binary) is not an executable file\n".utf8))
            return 2
        }
        if let url = ProcessInfo.processInfo.environment["DATABASE_URL"], !url.isEmpty {
            FileHandle.standardError.write(Data("inbox-bench: the gate runs each build on an embedded PostgreSQL of its own; unset DATABASE_URL\n".utf8))
            return 2
        }
        let work = Task { try await gate(options) }
        let signals = SignalWatcher(signals: [SIGINT, SIGTERM]) { _ in work.cancel() }
        defer { signals.cancel() }
        let record: Record
        do {
            record = try await work.value
        } catch is CancellationError {
            FileHandle.standardError.write(Data("inbox-bench: interrupted\n".utf8))
            return 130
        } catch {
            FileHandle.standardError.write(Data("inbox-bench: gate: \(error)\n".utf8))
            return 3
        }
        print(record.summary)
        do {
            try record.write(to: options.jsonPath)
            print("JSON: \(options.jsonPath)")
        } catch {
            FileHandle.standardError.write(Data("inbox-bench: cannot write \(options.jsonPath): \(error)\n".utf8))
            return 3
        }
        return record.status
    }

    /// Runs the gate: every path of `options`, group by group; a group that fails is recorded and
    /// the next still runs. Throws only when cancelled, or when the baseline's binary has no gate.
    static func gate(_ options: Options) async throws -> Record {
        let started = ContinuousClock.now
        let date = ISO8601DateFormatter().string(from: Date())
        let folder = URL(fileURLWithPath: options.jsonPath).deletingLastPathComponent().path
        try? FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        for binary in [options.baselineBinary, options.candidateBinary] { try requireGate(binary) }
        var results: [PathResult] = []
        var failures: [String: String] = [:]
        // The paths of one benchmark share its processes: one load, every path each round.
        var groups: [(BenchmarkName, [Path])] = []
        for path in options.paths {
            if let index = groups.firstIndex(where: { $0.0 == path.benchmark }) {
                groups[index].1.append(path)
            } else {
                groups.append((path.benchmark, [path]))
            }
        }
        for (benchmark, paths) in groups {
            do {
                results += try await judge(paths, of: benchmark, options: options, logFolder: folder)
            } catch {
                if error is CancellationError || Task.isCancelled { throw CancellationError() }
                for path in paths { failures[path.name] = "\(error)" }
                progress("gate: \(benchmark.rawValue) failed: \(error)")
            }
        }
        return Record(
            date: date, candidate: options.candidateBinary, baseline: options.baselineBinary, rule: .standard,
            seconds: (ContinuousClock.now - started).inSeconds, results: results, failures: failures)
    }

    /// Throws with a sentence when `binary` is not an inbox-bench that has the gate (one built
    /// from a commit before it cannot run rounds on command).
    static func requireGate(_ binary: String) throws {
        // A binary that could not be started at all (ETXTBSY: a file just written, whose descriptor
        // a process forked meanwhile still holds) is tried again, and said so; one that answers is not.
        var help: (status: Int32, output: String)?
        var failure: (any Error)?
        for attempt in 0..<4 where help == nil {
            if attempt > 0 { Thread.sleep(forTimeInterval: 0.25) }
            do { help = try Subprocess.run(binary, ["gate", "--help"]) } catch { failure = error }
        }
        guard let help else { throw BenchmarkFailure(description: "\(binary) could not be started: \(failure.map { "\($0)" } ?? "")") }
        guard help.status == 0 else {
            throw BenchmarkFailure(
                description: "\(binary) has no gate (built from a commit before it): write a new baseline (make bench-baseline) to judge against")
        }
    }

    /// Runs the group's two processes in turn until every path is judged, or `maxPairs`.
    static func judge(_ paths: [Path], of benchmark: BenchmarkName, options: Options, logFolder: String) async throws -> [PathResult] {
        let (scale, seconds) = settings(benchmark)
        let name = paths.map(\.name).joined(separator: "+")
        progress("gate: \(name): loading both builds (\(benchmark.rawValue), scale \(scale))")
        func start(_ binary: String, _ build: String) throws -> SteppedBenchmark {
            try SteppedBenchmark(
                binary: binary, benchmark: benchmark, configurations: paths.map(\.configuration), scale: scale, seconds: seconds,
                rounds: options.maxPairs + 1, log: "\(logFolder)/gate-\(name)-\(build).log")
        }
        let candidate = try start(options.candidateBinary, "candidate")
        defer { candidate.stop() }
        let baseline = try start(options.baselineBinary, "baseline")
        defer { baseline.stop() }
        try await candidate.waitUntilReady()
        try await baseline.waitUntilReady()

        var candidateRates: [String: [Double]] = [:]
        var baselineRates: [String: [Double]] = [:]
        var pairs = 0
        var results: [PathResult] = []
        while true {
            try Task.checkCancellation()
            pairs += 1
            let order = pairs % 2 == 1 ? [(candidate, true), (baseline, false)] : [(baseline, false), (candidate, true)]
            for (process, isCandidate) in order {
                let measured = try await process.round()
                for path in paths {
                    guard let rate = measured[path.configuration] else {
                        throw BenchmarkFailure(description: "\(path.configuration) was not measured (see \(process.log))")
                    }
                    if isCandidate { candidateRates[path.name, default: []].append(rate) } else { baselineRates[path.name, default: []].append(rate) }
                }
            }
            guard pairs >= options.pairs, (pairs - options.pairs) % 4 == 0 || pairs >= options.maxPairs else { continue }
            results = paths.map { path in
                let a = candidateRates[path.name] ?? [], b = baselineRates[path.name] ?? []
                return PathResult(
                    path: path.name, benchmark: benchmark.rawValue, configuration: path.configuration, candidateRates: a, baselineRates: b,
                    judgement: PairedRule.standard.judge(candidate: a, baseline: b))
            }
            for result in results { progress("gate: \(result.line.trimmingCharacters(in: .whitespaces))") }
            if pairs >= options.maxPairs || !results.contains(where: { $0.judgement.outcome == .inconclusive }) { break }
        }
        try await candidate.finish()
        try await baseline.finish()
        return results
    }
}

/// One build's benchmark process in `INBOX_BENCH_STEPPED` mode: a round when told, its rates read
/// from stdout; stderr to a log file. Spawned with posix_spawn and reaped with waitpid here, not
/// with Foundation's `Process`, which traps on `terminationStatus` when it missed the exit (see
/// `Subprocess`).
final class SteppedBenchmark: @unchecked Sendable {
    let log: String
    let binary: String
    private let pid: pid_t
    /// The parent's ends: the child's stdin and stdout. Both close-on-exec, so that the other
    /// build's process does not inherit them and hold the stdin open.
    private var toChild: Int32
    private let fromChild: Int32
    /// Read by one caller at a time (the gate's loop).
    private var buffer: [UInt8] = []
    private var exited = false

    init(binary: String, benchmark: BenchmarkName, configurations: [String], scale: Double, seconds: Int?, rounds: Int, log: String) throws {
        self.log = log
        self.binary = binary
        var input: [Int32] = [0, 0], output: [Int32] = [0, 0]
        guard pipe(&input) == 0, pipe(&output) == 0 else {
            throw BenchmarkFailure(description: "cannot make a pipe: \(String(cString: strerror(errno)))")
        }
        // The gate spawns one process at a time, so no other spawn sees them before this.
        for descriptor in input + output { _ = fcntl(descriptor, F_SETFD, FD_CLOEXEC) }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_adddup2(&actions, input[0], 0)
        posix_spawn_file_actions_adddup2(&actions, output[1], 1)
        posix_spawn_file_actions_addopen(&actions, 2, log, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        let arguments = [
            binary, benchmark.rawValue, "--rounds", String(rounds), "--scale", String(scale), "--json",
            log.replacingOccurrences(of: ".log", with: ".json"),
        ]
        var environment = ProcessInfo.processInfo.environment
        // Each build migrates with its own commit's migrations when its tree has them (a build at
        // `<tree>/.build/release/inbox-bench`): a migration that changed a key since the baseline
        // (sql/035, the mail counters') would otherwise fail the baseline's own code.
        if let migrations = Self.migrations(beside: binary) { environment["INBOX_MIGRATIONS_DIR"] = migrations }
        environment["INBOX_BENCH_STEPPED"] = "1"
        environment["INBOX_BENCH_ONLY"] = configurations.joined(separator: ",")
        if let seconds { environment["INBOX_BENCH_SECONDS"] = String(seconds) }
        // The gate ignores SIGINT and SIGTERM (SignalWatcher), and a spawned process inherits
        // that: its own handlers must get them, or `stop` could not end it cleanly.
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var defaults = sigset_t(), none = sigset_t()
        sigemptyset(&defaults)
        sigaddset(&defaults, SIGINT)
        sigaddset(&defaults, SIGTERM)
        sigemptyset(&none)
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        posix_spawnattr_setsigmask(&attributes, &none)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK))
        let argv: [UnsafeMutablePointer<CChar>?] = arguments.map { strdup($0) } + [nil]
        let envp: [UnsafeMutablePointer<CChar>?] = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer { (argv + envp).forEach { free($0) } }
        var pid: pid_t = 0
        let spawned = posix_spawn(&pid, binary, &actions, &attributes, argv, envp)
        close(input[0])
        close(output[1])
        guard spawned == 0 else {
            close(input[1])
            close(output[0])
            throw BenchmarkFailure(description: "\(binary) could not be started: \(String(cString: strerror(spawned)))")
        }
        self.pid = pid
        toChild = input[1]
        fromChild = output[0]
    }

    /// The `sql` folder of the tree a build at `<tree>/.build/<configuration>/inbox-bench` was made
    /// in, if it holds the migrations. The path as given: SwiftPM's `.build/release` is a link into
    /// `.build/<triple>/release`, one level deeper.
    static func migrations(beside binary: String) -> String? {
        let tree = URL(fileURLWithPath: binary).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let folder = tree.appendingPathComponent("sql")
        return FileManager.default.fileExists(atPath: folder.appendingPathComponent("001_event_log.sql").path) ? folder.path : nil
    }

    deinit {
        if toChild >= 0 { close(toChild) }
        close(fromChild)
    }

    /// The next line of stdout, nil at its end.
    private func line() async throws -> String? {
        while true {
            if let newline = buffer.firstIndex(of: UInt8(ascii: "\n")) {
                let line = String(decoding: buffer[..<newline], as: UTF8.self)
                buffer.removeSubrange(...newline)
                return line
            }
            let descriptor = fromChild
            let chunk = try await BlockingThread.run { () -> [UInt8] in
                var bytes = [UInt8](repeating: 0, count: 4096)
                while true {
                    let count = read(descriptor, &bytes, bytes.count)
                    if count >= 0 { return Array(bytes[..<count]) }
                    guard errno == EINTR else { return [] }
                }
            }
            if chunk.isEmpty { return nil }
            buffer += chunk
            // Its stdout carries only "ready" and "measured" lines: a longer one is not the protocol.
            guard buffer.count <= Self.longestLine else {
                throw BenchmarkFailure(description: "\(binary) wrote more than \(Self.longestLine / 1024) KiB without a line break on its stdout (see \(log))")
            }
        }
    }

    static let longestLine = 64 * 1024

    func waitUntilReady() async throws {
        while let line = try await line() {
            if line.hasPrefix("ready ") { return }
        }
        throw BenchmarkFailure(description: "\(binary) ended before its first round (see \(log))")
    }

    /// Runs one round: each configuration's rate.
    func round() async throws -> [String: Double] {
        var newline = UInt8(ascii: "\n")
        guard write(toChild, &newline, 1) == 1 else { throw BenchmarkFailure(description: "\(binary) is gone (see \(log))") }
        var rates: [String: Double] = [:]
        while let line = try await line() {
            if line.hasPrefix("ready ") { return rates }
            let words = line.split(separator: " ")
            if words.count == 4, words[0] == "measured", let rate = Double(words[3]) { rates[String(words[1])] = rate }
        }
        throw BenchmarkFailure(description: "\(binary) ended during a round (see \(log))")
    }

    /// Ends the rounds: the process writes its report and removes its database.
    func finish() async throws {
        close(toChild)
        toChild = -1
        let status = try await BlockingThread.run { [pid] in Self.wait(for: pid, timeout: .seconds(120)) }
        exited = status != nil
        guard status == 0 else { throw BenchmarkFailure(description: "\(binary) did not end cleanly (see \(log))") }
    }

    /// On an error or interruption: SIGTERM, which stops its embedded PostgreSQL; SIGKILL after 30 s.
    func stop() {
        guard !exited else { return }
        kill(pid, SIGTERM)
        if Self.wait(for: pid, timeout: .seconds(30)) == nil {
            kill(pid, SIGKILL)
            _ = Self.wait(for: pid, timeout: .seconds(5))
        }
        exited = true
    }

    /// The exit status (128 + the signal when killed), or nil when it has not ended in `timeout`.
    private static func wait(for pid: pid_t, timeout: Duration) -> Int32? {
        let deadline = ContinuousClock.now + timeout
        var status: Int32 = 0
        while ContinuousClock.now < deadline {
            let reaped = waitpid(pid, &status, WNOHANG)
            if reaped == pid { return (status & 0x7f) == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f) }
            if reaped == -1 && errno != EINTR { return -1 }
            usleep(20_000)
        }
        return nil
    }
}
