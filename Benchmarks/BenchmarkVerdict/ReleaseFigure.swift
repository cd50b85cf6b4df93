import Foundation

/// One figure of a release run: one configuration of one benchmark, its rate in every round and,
/// when the benchmark measures a ceiling beside it in the same run, its ratio to that ceiling in
/// every round (round r of the configuration divided by round r of the ceiling).
///
/// Only the ratios are gated: the rates move with whatever else the shared machine is doing, the
/// ratio to a ceiling measured a few seconds apart much less.
public struct ReleaseFigure: Codable, Sendable, Equatable {
    /// `benchmark/configuration`, e.g. `append/client-batch-1000`: stable across runs.
    public var id: String
    public var benchmark: String
    public var title: String
    /// What the rate counts: `events`, `requests`, `pushes`, `mails`, `messages`.
    public var unit: String
    /// Per second, in round order.
    public var rates: [Double]
    public var medianRate: Double
    /// The title of the same-run ceiling the ratios are taken to; nil for a figure that has none.
    public var ceiling: String?
    /// Rate ÷ the ceiling's rate of the same round, in round order; nil when there is no ceiling.
    public var ratios: [Double]?
    public var medianRatio: Double?

    public init(id: String, benchmark: String, title: String, unit: String, rates: [Double], ceiling: String? = nil, ratios: [Double]? = nil) {
        self.id = id
        self.benchmark = benchmark
        self.title = title
        self.unit = unit
        self.rates = rates
        medianRate = Statistics.median(rates)
        self.ceiling = ceiling
        self.ratios = ratios
        medianRatio = ratios.map(Statistics.median)
    }

    /// Gated: it has a ratio to a same-run ceiling.
    public var isGated: Bool { medianRatio != nil }
}

/// The figures a release is compared with: written by `inbox-bench release --write-baseline`
/// (`make bench-baseline`) and committed with the release.
public struct Baseline: Codable, Sendable, Equatable {
    /// The layout of this file; a reader refuses another.
    public var format: Int
    /// The commit the run was made from (`git rev-parse HEAD`, with `-dirty` when the tree had changes).
    public var commit: String
    /// ISO 8601, UTC.
    public var date: String
    /// One line: cores, memory, CPU model.
    public var machine: String
    /// One line: the PostgreSQL version and its durability settings.
    public var postgres: String
    /// The benchmarks' scales and rounds, one line each (`append: scale 1.0, 5 rounds`): a run at
    /// other scales is still compared, with a warning.
    public var plan: [String]
    public var figures: [ReleaseFigure]

    public static let currentFormat = 1

    public init(commit: String, date: String, machine: String, postgres: String, plan: [String], figures: [ReleaseFigure]) {
        format = Self.currentFormat
        self.commit = commit
        self.date = date
        self.machine = machine
        self.postgres = postgres
        self.plan = plan
        self.figures = figures
    }

    public func encoded() throws -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        return try encoder.encode(self)
    }

    public static func decode(_ data: Data) throws -> Baseline {
        let baseline = try JSONDecoder().decode(Baseline.self, from: data)
        guard baseline.format == currentFormat else { throw UnknownFormat(format: baseline.format) }
        return baseline
    }

    public struct UnknownFormat: Error, CustomStringConvertible {
        public var format: Int
        public var description: String { "baseline format \(format), this inbox-bench reads format \(Baseline.currentFormat)" }
    }
}

public enum Statistics {
    public static func median(_ values: [Double]) -> Double {
        let sorted = values.sorted()
        guard !sorted.isEmpty else { return 0 }
        let middle = sorted.count / 2
        return sorted.count % 2 == 1 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2
    }

    /// (max − min) ÷ median: how far apart the rounds were, as a share of the figure. 0 for fewer
    /// than two values or a median of 0.
    public static func relativeSpread(_ values: [Double]) -> Double {
        guard values.count >= 2, let low = values.min(), let high = values.max() else { return 0 }
        let middle = median(values)
        return middle > 0 ? (high - low) / middle : 0
    }
}
