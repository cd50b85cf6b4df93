import Foundation
import PostgresClient

/// Everything a run produced: written as JSON, printed as a table.
struct RunReport: Codable, Sendable {
    struct Machine: Codable, Sendable {
        var activeProcessorCount: Int
        var processorCount: Int
        var physicalMemory: UInt64
        var cpuModel: String?
        var operatingSystem: String

        static var current: Machine {
            let info = ProcessInfo.processInfo
            return Machine(
                activeProcessorCount: info.activeProcessorCount, processorCount: info.processorCount,
                physicalMemory: info.physicalMemory, cpuModel: cpuModel(), operatingSystem: info.operatingSystemVersionString)
        }

        private static func cpuModel() -> String? {
            guard let text = try? String(contentsOfFile: "/proc/cpuinfo", encoding: .utf8) else { return nil }
            for line in text.split(separator: "\n") where line.hasPrefix("model name") {
                if let colon = line.firstIndex(of: ":") {
                    return line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
                }
            }
            return nil
        }
    }

    struct Database: Codable, Sendable {
        var version: String
        var target: String
        var embedded: Bool
        /// Durability and memory settings that move the figures (fsync, synchronous_commit, ...).
        var settings: [String: String]

        static let reportedSettings = [
            "fsync", "synchronous_commit", "full_page_writes", "wal_level", "shared_buffers", "max_wal_size", "checkpoint_timeout",
            "wal_sync_method",
        ]

        static func describe(_ database: BenchmarkDatabase) async throws -> Database {
            try await database.client.withConnection { connection in
                let version = try connection.query("SELECT version()").scalar(String.self)
                var settings: [String: String] = [:]
                for row in try connection.query(
                    "SELECT name, current_setting(name) AS value FROM pg_settings WHERE name = ANY($1)",
                    reportedSettings)
                {
                    settings[try row.decode(String.self, "name")] = try row.decode(String.self, "value")
                }
                return Database(version: version, target: database.description, embedded: database.isEmbedded, settings: settings)
            }
        }

        /// `PostgreSQL 15.14` out of the long `version()` text.
        var shortVersion: String {
            version.split(separator: " ").prefix(2).joined(separator: " ")
        }
    }

    var benchmark: String
    /// What the rates count: `events`, `requests` (http), `pushes` (fanout), `mails`, `messages`.
    var unit: String
    var date: String
    var rounds: Int
    var scale: Double
    var machine: Machine
    var postgres: Database
    var configurations: [ConfigurationResult]
    var notes: [String: String]

    func writeJSON(to path: String) throws {
        let url = URL(fileURLWithPath: path)
        try FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        try encoder.encode(self).write(to: url, options: .atomic)
    }

    /// Whether the rounds carry latencies (the `http` rows): the table then shows them instead of
    /// the events per round and the building share.
    var hasLatencies: Bool { configurations.contains { $0.rounds.contains { $0.latency != nil } } }

    /// The readable table for stdout, in the benchmark's own unit.
    var table: String {
        let memory = String(format: "%.1f GiB", Double(machine.physicalMemory) / 1_073_741_824)
        let fsync = postgres.settings["fsync"].map { "fsync \($0)" } ?? "fsync ?"
        let commit = postgres.settings["synchronous_commit"].map { "synchronous_commit \($0)" } ?? ""
        var lines = [
            "\(benchmark) benchmark, \(date)",
            "\(rounds) round\(rounds == 1 ? "" : "s") (medians below), scale \(scale); \(machine.activeProcessorCount) cores, \(memory); "
                + "\(postgres.shortVersion) (\(postgres.embedded ? "embedded" : "DATABASE_URL"), \(fsync), \(commit))",
            "",
        ]
        let latencies = hasLatencies
        let perSecond = "\(unit)/s"
        var columns = ["configuration".padding(toLength: 44, withPad: " ", startingAt: 0)]
        if !latencies { columns.append("\(unit)/round".leftPadded(13)) }
        columns += ["median \(perSecond)".leftPadded(17), "min".leftPadded(10), "max".leftPadded(10)]
        columns += latencies ? ["p50".leftPadded(10), "p99".leftPadded(10), "p99.9".leftPadded(10)] : ["building".leftPadded(9)]
        columns.append("vs ceiling".leftPadded(10))
        let header = columns.joined(separator: " ")
        lines.append(header)
        lines.append(String(repeating: "-", count: header.count))
        for configuration in configurations {
            var cells = [configuration.title.padding(toLength: 44, withPad: " ", startingAt: 0)]
            if !latencies { cells.append(formatGrouped(Double(configuration.eventsPerRound)).leftPadded(13)) }
            cells += [
                formatGrouped(configuration.medianEventsPerSecond).leftPadded(17),
                formatGrouped(configuration.minimumEventsPerSecond).leftPadded(10),
                formatGrouped(configuration.maximumEventsPerSecond).leftPadded(10),
            ]
            if latencies {
                let measured = configuration.rounds.compactMap(\.latency)
                cells += [\Latency.p50, \Latency.p99, \Latency.p999].map { path in
                    (measured.isEmpty ? "" : Self.milliseconds(median(measured.map { $0[keyPath: path] }))).leftPadded(10)
                }
            } else {
                cells.append((configuration.medianBuildShare.map { String(format: "%.0f%%", $0 * 100) } ?? "").leftPadded(9))
            }
            cells.append(
                (configuration.ratioToServerSide.map { String(format: "%.2f", $0) } ?? (configuration.kind == .serverSide ? "1.00" : configuration.kind == .paced ? "paced" : configuration.kind == .probe ? "machine" : ""))
                    .leftPadded(10))
            lines.append(cells.joined(separator: " "))
        }
        lines.append("")
        if latencies {
            lines.append("p50, p99, p99.9: the medians over the rounds of each round's latency percentiles (wrk); every round's below.")
            if configurations.contains(where: { $0.kind == .paced }) {
                lines.append("paced: held to a target rate, so its latency is the figure, not its rate; not compared with the ceiling.")
            }
            if configurations.contains(where: { $0.kind == .probe }) {
                lines.append("machine: a measurement of the machine (the disk's flushes), beside the tier's rows; not compared with the ceiling.")
            }
        } else {
            lines.append("building: median share of the appenders' time spent building NewEvent values (the rest is EventStore.append).")
        }
        let ceilings = Set(configurations.compactMap(\.ceilingId))
        let ceilingTitles = configurations.filter { ceilings.contains($0.id) }.map(\.title)
        if !ceilingTitles.isEmpty {
            lines.append(
                "vs ceiling: the configuration's median divided by the median of the same run's ceiling (\(ceilingTitles.joined(separator: "; "))).")
        }
        lines.append("per round (\(perSecond)\(latencies ? ", p50 / p99 / p99.9" : ""), in round order):")
        for configuration in configurations {
            let rates = configuration.rounds.map { round in
                formatGrouped(round.eventsPerSecond)
                    + (round.latency.map { " (\(Self.milliseconds($0.p50)) / \(Self.milliseconds($0.p99)) / \(Self.milliseconds($0.p999)))" } ?? "")
            }
            lines.append("  \(configuration.title): \(rates.joined(separator: ", "))")
        }
        return lines.joined(separator: "\n")
    }

    /// 0.00695 → "6.95 ms".
    static func milliseconds(_ seconds: Double) -> String { String(format: "%.2f ms", seconds * 1000) }
}

/// 12345.6 → "12,346".
func formatGrouped(_ value: Double) -> String {
    guard value.isFinite else { return "-" }
    let rounded = Int(value.rounded())
    var digits = String(rounded.magnitude)
    var groups: [Substring] = []
    while digits.count > 3 {
        groups.insert(Substring(digits.suffix(3)), at: 0)
        digits.removeLast(3)
    }
    groups.insert(Substring(digits), at: 0)
    return (rounded < 0 ? "-" : "") + groups.joined(separator: ",")
}

extension String {
    func leftPadded(_ width: Int) -> String {
        count >= width ? self : String(repeating: " ", count: width - count) + self
    }
}
