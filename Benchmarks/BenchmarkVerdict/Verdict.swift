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
///
/// A margin wider than `judgeable` cannot tell a fall of that much from the noise: such a figure is
/// **inconclusive** (unless it fell even past its wide margin), and so is the release verdict, to be
/// run again, never passed.
public struct MarginRule: Codable, Sendable, Equatable {
    public var floor: Double
    public var multiplier: Double
    /// The widest margin a figure is judged with: the fall the gate must catch (a fifth).
    public var judgeable: Double

    public static let standard = MarginRule(floor: 0.05, multiplier: 1, judgeable: 0.20)

    public init(floor: Double, multiplier: Double, judgeable: Double = 0.20) {
        self.floor = floor
        self.multiplier = multiplier
        self.judgeable = judgeable
    }

    /// A report written before `judgeable` existed reads as the standard's.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        floor = try container.decode(Double.self, forKey: .floor)
        multiplier = try container.decode(Double.self, forKey: .multiplier)
        judgeable = try container.decodeIfPresent(Double.self, forKey: .judgeable) ?? Self.standard.judgeable
    }

    public func margin(baseline: [Double], run: [Double]) -> Double {
        max(floor, multiplier * max(Statistics.relativeSpread(baseline), Statistics.relativeSpread(run)))
    }

    /// One line for the report and the docs.
    public var statement: String {
        "margin = max(\(Int((floor * 100).rounded())) %, \(multiplier == 1 ? "" : "\(multiplier) × ")the larger spread of the baseline's "
            + "and this run's rounds), spread = (max − min) ÷ median of the per-round ratios; a figure fails when its median ratio "
            + "is below the baseline's × (1 − margin); a figure whose margin is over \(Int((judgeable * 100).rounded())) % and that did not fall "
            + "is inconclusive (run again)"
    }
}

/// The judgement of one gated figure.
public struct FigureVerdict: Codable, Sendable, Equatable {
    public enum Outcome: String, Codable, Sendable {
        /// At or above the baseline less its margin.
        case passed
        /// Below it.
        case fell
        /// Not below it, but its margin is wider than a fall the gate must catch (`MarginRule.judgeable`):
        /// the rounds were too far apart to tell. Never a pass.
        case inconclusive
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
        case .inconclusive:
            return "\(name): \(Self.format(ratio)) of \(ceiling ?? "its ceiling"), baseline \(Self.format(baselineRatio)), "
                + "margin \(String(format: "%.0f", (margin ?? 0) * 100)) %: its rounds are too far apart to catch a fall; run again"
        }
    }

    static func format(_ value: Double?) -> String { value.map { String(format: "%.3f", $0) } ?? "-" }
}

/// Every gated figure of a run against the baseline. `passed` is the release's answer.
public struct ReleaseVerdict: Codable, Sendable, Equatable {
    public var rule: MarginRule
    public var figures: [FigureVerdict]

    public var failures: [FigureVerdict] { figures.filter(\.failed) }
    /// The figures that could not be judged.
    public var inconclusive: [FigureVerdict] { figures.filter { $0.outcome == .inconclusive } }
    /// Every gated figure was judged, and none fell.
    public var passed: Bool { failures.isEmpty && inconclusive.isEmpty }

    /// `PASSED`, `FAILED: ids` (a fall wins over doubt), or `INCONCLUSIVE, run again: ids`.
    public var answer: String {
        if !failures.isEmpty { return "FAILED: \(failures.map(\.id).joined(separator: ", "))" }
        if !inconclusive.isEmpty { return "INCONCLUSIVE, run again: \(inconclusive.map(\.id).joined(separator: ", "))" }
        return "PASSED"
    }

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
            let outcome: FigureVerdict.Outcome = ratio < threshold ? .fell : margin > rule.judgeable ? .inconclusive : .passed
            verdicts.append(
                FigureVerdict(
                    id: figure.id, title: figure.title, ceiling: figure.ceiling, outcome: outcome, ratio: ratio,
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
