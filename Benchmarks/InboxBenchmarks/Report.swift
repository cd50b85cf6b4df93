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

    /// The readable table for stdout.
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
        let header = [
            "configuration".padding(toLength: 44, withPad: " ", startingAt: 0), "events/round".leftPadded(12),
            "median ev/s".leftPadded(12), "min ev/s".leftPadded(10), "max ev/s".leftPadded(10), "building".leftPadded(9),
            "vs server".leftPadded(10),
        ].joined(separator: " ")
        lines.append(header)
        lines.append(String(repeating: "-", count: header.count))
        for configuration in configurations {
            lines.append(
                [
                    configuration.title.padding(toLength: 44, withPad: " ", startingAt: 0),
                    formatGrouped(Double(configuration.eventsPerRound)).leftPadded(12),
                    formatGrouped(configuration.medianEventsPerSecond).leftPadded(12),
                    formatGrouped(configuration.minimumEventsPerSecond).leftPadded(10),
                    formatGrouped(configuration.maximumEventsPerSecond).leftPadded(10),
                    (configuration.medianBuildShare.map { String(format: "%.0f%%", $0 * 100) } ?? "").leftPadded(9),
                    (configuration.ratioToServerSide.map { String(format: "%.2f", $0) } ?? (configuration.kind == .serverSide ? "1.00" : ""))
                        .leftPadded(10),
                ].joined(separator: " "))
        }
        lines.append("")
        lines.append("building: median share of the appenders' time spent building NewEvent values (the rest is EventStore.append).")
        lines.append("vs server: the configuration's median divided by the server-side median of the same run.")
        lines.append("per round (events/s, in round order):")
        for configuration in configurations {
            let rates = configuration.rounds.map { formatGrouped($0.eventsPerSecond) }.joined(separator: ", ")
            lines.append("  \(configuration.title): \(rates)")
        }
        return lines.joined(separator: "\n")
    }
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
