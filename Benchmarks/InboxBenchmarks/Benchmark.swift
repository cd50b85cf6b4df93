import Encodings
import Foundation
import PostgresClient

/// The benchmarks `inbox-bench` knows, by the name given as its first argument.
/// A new benchmark is a type conforming to `Benchmark` plus a case here.
enum BenchmarkName: String, CaseIterable, Sendable {
    case append
    case projection
    case http
    case fanout
    case schedule
    case mail
    case identity
    case sealing

    var summary: String {
        switch self {
        case .append: "EventStore.append in batches of 1, 100 and 1,000 (and 4 appenders at once) beside the server-side insert rate"
        case .projection: "replay and async catch-up of the read models over 1,000,000 events and 100,000 people, beside the server-side insert rate"
        case .http: "the API under wrk: the bell page and device lists of many people beside /healthz (needs wrk)"
        case .fanout: "the push fan-out from outbox to TLS HTTP/2 (nghttpd as APNs and FCM) beside h2load against the same server"
        case .schedule: "one shop_unanswered reminder check over 100,000 threads of 2,000 shops (400 days of history, 3,500 in the window) and its plan"
        case .mail: "the mail outbox end to end: 2,000 people's notifications decided, rendered and sent over SMTP to a local sink, beside render-only"
        case .identity: "the token endpoint under wrk: password sign-ins at two Argon2id costs, refreshes and guest tokens beside /healthz (needs wrk)"
        case .sealing: "append, a post's inline write and a replay with personal data sealed per person and without, side by side on two logs"
        }
    }

    func make(options: Options) -> any Benchmark {
        switch self {
        case .append: AppendBenchmark(rounds: options.rounds, scale: options.scale)
        case .projection: ProjectionBenchmark(rounds: options.rounds, scale: options.scale)
        case .http: HTTPBenchmark(rounds: options.rounds, scale: options.scale)
        case .fanout: FanoutBenchmark(rounds: options.rounds, scale: options.scale)
        case .schedule: ScheduleBenchmark(rounds: options.rounds, scale: options.scale)
        case .mail: MailBenchmark(rounds: options.rounds, scale: options.scale)
        case .identity: IdentityBenchmark(rounds: options.rounds, scale: options.scale)
        case .sealing: SealingBenchmark(rounds: options.rounds, scale: options.scale)
        }
    }

    /// What one unit of the benchmark's rate is: the table's and the JSON's `unit`.
    var unit: String {
        switch self {
        case .append, .projection, .sealing: "events"
        case .http, .identity: "requests"
        case .fanout: "pushes"
        case .schedule: "messages"
        case .mail: "mails"
        }
    }
}

/// One benchmark: it gets a migrated database and returns its configurations' figures.
protocol Benchmark: Sendable {
    func run(on database: BenchmarkDatabase) async throws -> BenchmarkResult
}

/// One thing measured: run once per round by `runInterleaved`.
struct BenchmarkCase: Sendable {
    /// Stable identifier, used in the JSON (`client-batch-100`).
    var id: String
    /// The table's row title.
    var title: String
    /// What the row measures, one sentence (also in the JSON).
    var description: String
    var kind: ConfigurationResult.Kind
    var batchSize: Int
    var appenders: Int
    var eventsPerRound: Int
    /// Runs the configuration once; `round` is 1-based.
    var run: @Sendable (_ round: Int) async throws -> Measurement
}

/// One run of one configuration.
struct Measurement: Codable, Sendable {
    var round: Int
    var events: Int
    var seconds: Double
    var eventsPerSecond: Double
    /// Time spent building the `NewEvent` values (payload JSON), summed over appenders.
    var buildSeconds: Double?
    /// Time spent in `EventStore.append` (round trip, server work, decoding), summed over appenders.
    var appendSeconds: Double?
    /// CPU time per event by process (microseconds), where a benchmark measures it.
    var cpuMicrosecondsPerEvent: [String: Double]?
    /// The answers' latency in this round, where the load generator reports it (`http`).
    var latency: Latency?
    /// The slowest operation of the round and how many took longer than the probe's stall
    /// threshold, in seconds and a count (the disk flush probe of `http`).
    var slowest: Double?
    var stalls: Int?

    init(round: Int, events: Int, elapsed: Duration, build: Duration? = nil, append: Duration? = nil) {
        self.round = round
        self.events = events
        seconds = elapsed.inSeconds
        eventsPerSecond = seconds > 0 ? Double(events) / seconds : 0
        buildSeconds = build?.inSeconds
        appendSeconds = append?.inSeconds
    }
}

/// Latency percentiles of one round, in seconds.
struct Latency: Codable, Sendable, Equatable {
    var p50: Double
    var p99: Double
    var p999: Double
}

/// The figures of one configuration over every round.
struct ConfigurationResult: Codable, Sendable {
    enum Kind: String, Codable, Sendable {
        /// Through the Swift client (`EventStore.append`).
        case client
        /// Rows made and inserted by the server itself: the ceiling the client is compared with.
        case serverSide
        /// Held to a rate (the `http` rows "at 5000/s"): the latency at that rate is the figure, and
        /// the rate reached is the target's, so it is not compared with the ceiling (nor gated).
        case paced
        /// A measurement of the machine rather than of the tier (the disk's flush latency, beside
        /// the posting rows): context for the other rows, neither compared with the ceiling nor gated.
        case probe
    }

    var id: String
    var title: String
    var description: String
    var kind: Kind
    var batchSize: Int
    var appenders: Int
    var eventsPerRound: Int
    var rounds: [Measurement]
    var medianEventsPerSecond: Double
    var minimumEventsPerSecond: Double
    var maximumEventsPerSecond: Double
    /// The median share of the time spent building events (client configurations).
    var medianBuildShare: Double?
    /// `medianEventsPerSecond` divided by the server-side configuration's median.
    var ratioToServerSide: Double?
    /// The id of the server-side configuration (the same-run ceiling) the ratios are taken to.
    var ceilingId: String?
    /// Each round's rate divided by the ceiling's rate in the same round: the spread of these is
    /// what the release gate's margin is made of.
    var ratiosPerRound: [Double]?
}

/// What a benchmark returns: its configurations, and facts worth keeping beside the figures.
struct BenchmarkResult: Codable, Sendable {
    var benchmark: String
    var configurations: [ConfigurationResult]
    var notes: [String: String]
}

/// Runs every case once per round, rotating which case goes first so that no configuration always
/// follows the same one (checkpoints and autovacuum then land on each of them in turn).
///
/// `INBOX_BENCH_ONLY=id,id` runs only the configurations of those ids (to study one).
/// `unit` names what the progress lines' rates count (`requests`, `pushes`).
func runInterleaved(_ cases: [BenchmarkCase], rounds: Int, unit: String = "events") async throws -> [ConfigurationResult] {
    var cases = cases
    if let only = ProcessInfo.processInfo.environment["INBOX_BENCH_ONLY"], !only.isEmpty {
        let ids = Set(only.split(separator: ",").map(String.init))
        cases = cases.filter { ids.contains($0.id) }
        guard !cases.isEmpty else { throw BenchmarkFailure(description: "INBOX_BENCH_ONLY names no configuration of this benchmark: \(only)") }
    }
    var measurements = Array(repeating: [Measurement](), count: cases.count)
    let stepped = SteppedRounds.isOn
    for round in 1...rounds {
        if stepped, try await !SteppedRounds.awaitGo(round: round) { break }
        for step in 0..<cases.count {
            try Task.checkCancellation()
            let index = (step + round - 1) % cases.count
            let measured = try await cases[index].run(round)
            measurements[index].append(measured)
            if stepped { SteppedRounds.report(cases[index].id, round: round, rate: measured.eventsPerSecond) }
            progress(
                "round \(round)/\(rounds)  \(cases[index].title.padding(toLength: 44, withPad: " ", startingAt: 0))"
                    + "\(formatGrouped(measured.eventsPerSecond).leftPadded(10)) \(unit)/s  (\(formatGrouped(Double(measured.events))) in "
                    + "\(String(format: "%.2f", measured.seconds)) s)")
        }
    }
    var results = zip(cases, measurements).map { benchmarkCase, rounds in
        let rates = rounds.map(\.eventsPerSecond)
        let buildShares = rounds.compactMap { measurement in
            measurement.buildSeconds.map { $0 / max(measurement.seconds * Double(benchmarkCase.appenders), .leastNonzeroMagnitude) }
        }
        return ConfigurationResult(
            id: benchmarkCase.id, title: benchmarkCase.title, description: benchmarkCase.description, kind: benchmarkCase.kind,
            batchSize: benchmarkCase.batchSize, appenders: benchmarkCase.appenders, eventsPerRound: benchmarkCase.eventsPerRound,
            rounds: rounds, medianEventsPerSecond: median(rates), minimumEventsPerSecond: rates.min() ?? 0,
            maximumEventsPerSecond: rates.max() ?? 0, medianBuildShare: buildShares.isEmpty ? nil : median(buildShares),
            ratioToServerSide: nil)
    }
    // Each client row is compared with the server-side row of the same concurrency (one session for
    // one appender, several for several), falling back to the single-session row.
    let servers = results.filter { $0.kind == .serverSide && $0.medianEventsPerSecond > 0 }
    for index in results.indices where results[index].kind == .client {
        let concurrent = results[index].appenders > 1
        guard let server = servers.first(where: { ($0.appenders > 1) == concurrent }) ?? servers.first else { continue }
        results[index].ratioToServerSide = results[index].medianEventsPerSecond / server.medianEventsPerSecond
        results[index].ceilingId = server.id
        results[index].ratiosPerRound = zip(results[index].rounds, server.rounds).map { client, ceiling in
            ceiling.eventsPerSecond > 0 ? client.eventsPerSecond / ceiling.eventsPerSecond : 0
        }
    }
    return results
}

func median(_ values: [Double]) -> Double {
    let sorted = values.sorted()
    guard !sorted.isEmpty else { return 0 }
    let middle = sorted.count / 2
    return sorted.count % 2 == 1 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2
}

/// Rounds run one at a time when told, for `inbox-bench gate`, which alternates the rounds of two
/// builds' processes (`INBOX_BENCH_STEPPED=1`). Before each round the process writes
/// `ready <round>` on stdout and waits for a line on stdin; after each configuration's run it writes
/// `measured <id> <round> <rate>`. The end of stdin ends the rounds: what was measured is then
/// reported as usual, and the database cleaned up.
enum SteppedRounds {
    static let isOn = ProcessInfo.processInfo.environment["INBOX_BENCH_STEPPED"] == "1"

    /// False at the end of stdin.
    static func awaitGo(round: Int) async throws -> Bool {
        write("ready \(round)\n")
        return try await BlockingThread.run { readLine(strippingNewline: true) != nil }
    }

    static func report(_ id: String, round: Int, rate: Double) {
        write("measured \(id) \(round) \(rate)\n")
    }

    /// Unbuffered, so the gate reads each line when it is written.
    private static func write(_ line: String) {
        FileHandle.standardOutput.write(Data(line.utf8))
    }
}

/// How long each timed row of the HTTP and identity benchmarks runs: `INBOX_BENCH_SECONDS`
/// (1 to 60), or `standard`. The gate's short rounds use 2.
func benchSeconds(standard: Int) -> Int {
    guard let text = ProcessInfo.processInfo.environment["INBOX_BENCH_SECONDS"], let seconds = Int(text), (1...60).contains(seconds) else { return standard }
    return seconds
}

/// A benchmark that could not measure what it meant to (the database answered something unexpected).
struct BenchmarkFailure: Error, CustomStringConvertible {
    var description: String
}

/// A progress line on stderr, so that stdout holds only the table.
func progress(_ line: String) {
    FileHandle.standardError.write(Data((line + "\n").utf8))
}
