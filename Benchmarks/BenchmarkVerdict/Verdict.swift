import Foundation

/// How far below its baseline a gated figure may fall: the spread between rounds, never less than
/// a floor.
///
///     margin = max(floor, multiplier × max(spread(baseline's rounds), spread(this run's rounds)))
///     spread = (max − min) ÷ median of the per-round ratios
///
/// A figure fails when this run's median ratio is below `baseline median × (1 − margin)`: it fell
/// further than its own rounds (or the baseline's) were apart, so the fall is not the machine's
/// noise as measured. The floor keeps a figure whose rounds happened to agree closely from failing
/// on a few percent.
public struct MarginRule: Codable, Sendable, Equatable {
    public var floor: Double
    public var multiplier: Double

    public static let standard = MarginRule(floor: 0.05, multiplier: 1)

    public init(floor: Double, multiplier: Double) {
        self.floor = floor
        self.multiplier = multiplier
    }

    public func margin(baseline: [Double], run: [Double]) -> Double {
        max(floor, multiplier * max(Statistics.relativeSpread(baseline), Statistics.relativeSpread(run)))
    }

    /// One line for the report and the docs.
    public var statement: String {
        "margin = max(\(Int((floor * 100).rounded())) %, \(multiplier == 1 ? "" : "\(multiplier) × ")the larger spread of the baseline's "
            + "and this run's rounds), spread = (max − min) ÷ median of the per-round ratios; a figure fails when its median ratio "
            + "is below the baseline's × (1 − margin)"
    }
}

/// The judgement of one gated figure.
public struct FigureVerdict: Codable, Sendable, Equatable {
    public enum Outcome: String, Codable, Sendable {
        /// At or above the baseline less its margin.
        case passed
        /// Below it.
        case fell
        /// In the baseline, not measured in this run (a configuration gone or skipped).
        case missing
        /// Measured, not in the baseline (a configuration since added): reported, not gated.
        case new
    }

    public var id: String
    public var title: String
    public var ceiling: String?
    public var outcome: Outcome
    /// This run's median ratio (nil when missing).
    public var ratio: Double?
    /// The baseline's median ratio (nil when new).
    public var baselineRatio: Double?
    public var margin: Double?
    /// The lowest median ratio that passes: baseline × (1 − margin).
    public var threshold: Double?

    public var failed: Bool { outcome == .fell || outcome == .missing }

    /// `http/bell-page (GET /v1/me/notifications): 0.082 of GET /healthz, baseline 0.110, margin 12 % (passes from 0.097)`.
    public var line: String {
        let name = "\(id) (\(title))"
        switch outcome {
        case .missing:
            return "\(name): not measured in this run; the baseline has \(Self.format(baselineRatio))"
        case .new:
            return "\(name): \(Self.format(ratio)) of \(ceiling ?? "its ceiling"), not in the baseline"
        case .passed, .fell:
            return "\(name): \(Self.format(ratio)) of \(ceiling ?? "its ceiling"), baseline \(Self.format(baselineRatio)), "
                + "margin \(String(format: "%.0f", (margin ?? 0) * 100)) % (passes from \(Self.format(threshold)))"
        }
    }

    static func format(_ value: Double?) -> String { value.map { String(format: "%.3f", $0) } ?? "-" }
}

/// Every gated figure of a run against the baseline. `passed` is the release's answer.
public struct ReleaseVerdict: Codable, Sendable, Equatable {
    public var rule: MarginRule
    public var figures: [FigureVerdict]

    public var failures: [FigureVerdict] { figures.filter(\.failed) }
    public var passed: Bool { failures.isEmpty }

    public init(rule: MarginRule, figures: [FigureVerdict]) {
        self.rule = rule
        self.figures = figures
    }

    /// Judges the run's gated figures (those with ratios) against the baseline's, in the run's
    /// order, then the baseline's gated figures this run did not measure.
    public static func judge(run: [ReleaseFigure], baseline: Baseline, rule: MarginRule = .standard) -> ReleaseVerdict {
        let before = Dictionary(baseline.figures.filter(\.isGated).map { ($0.id, $0) }, uniquingKeysWith: { first, _ in first })
        var verdicts: [FigureVerdict] = []
        for figure in run {
            guard let ratios = figure.ratios, let ratio = figure.medianRatio else { continue }
            guard let old = before[figure.id], let oldRatios = old.ratios, let oldRatio = old.medianRatio else {
                verdicts.append(FigureVerdict(id: figure.id, title: figure.title, ceiling: figure.ceiling, outcome: .new, ratio: ratio))
                continue
            }
            let margin = rule.margin(baseline: oldRatios, run: ratios)
            let threshold = oldRatio * (1 - margin)
            verdicts.append(
                FigureVerdict(
                    id: figure.id, title: figure.title, ceiling: figure.ceiling, outcome: ratio < threshold ? .fell : .passed, ratio: ratio,
                    baselineRatio: oldRatio, margin: margin, threshold: threshold))
        }
        let measured = Set(run.filter(\.isGated).map(\.id))
        for old in baseline.figures where old.isGated && !measured.contains(old.id) {
            verdicts.append(
                FigureVerdict(id: old.id, title: old.title, ceiling: old.ceiling, outcome: .missing, baselineRatio: old.medianRatio))
        }
        return ReleaseVerdict(rule: rule, figures: verdicts)
    }
}
