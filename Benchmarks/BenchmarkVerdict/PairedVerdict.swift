import Foundation

/// The judgement of a figure measured A B A B: rounds of the candidate and of the baseline's own
/// binary alternate in one run, so each pair saw the same machine, and the figure is each pair's
/// ratio, candidate ÷ baseline. A neighbour that slows the machine for a minute slows both halves
/// of the pairs it meets, where a baseline measured days before compares the candidate with
/// another machine.
///
/// The rule, for a slowdown `s` (0.20) that must be caught:
///
/// - the median of the pairs' ratios, and a distribution-free confidence interval for it: the
///   k-th smallest and k-th largest ratio, k the largest for which the interval covers the median
///   with at least `confidence` (the sign test's binomial tail, no assumption about the noise's shape);
/// - **fell**: the median is below 1 − s/2 and the interval's top is below 1 (not the unchanged build);
/// - **passed**: the median is at or above 1 − s/2 and the interval's bottom above 1 − s (not a fall of s);
/// - **inconclusive** otherwise: the pairs disagree too much to tell an unchanged build from one
///   `s` slower, and the run must be repeated, never passed.
public struct PairedRule: Codable, Sendable, Equatable {
    /// The slowdown that must be caught (0.20: a fifth less throughput).
    public var slowdown: Double
    /// How sure the interval is to cover the true median ratio.
    public var confidence: Double

    public static let standard = PairedRule(slowdown: 0.20, confidence: 0.90)

    public init(slowdown: Double, confidence: Double) {
        self.slowdown = slowdown
        self.confidence = confidence
    }

    /// The rule in a sentence, for the gate's output.
    public var statement: String {
        let percent = { (value: Double) in String(format: "%.0f %%", value * 100) }
        return "a path falls when the median of its pairs' ratios is below \(String(format: "%.2f", threshold)) and its \(percent(confidence)) interval below 1, "
            + "and passes when the median is at least \(String(format: "%.2f", threshold)) and the interval above \(String(format: "%.2f", 1 - slowdown))"
    }

    /// The boundary between passing and falling: half the slowdown.
    public var threshold: Double { 1 - slowdown / 2 }

    public func judge(candidate: [Double], baseline: [Double]) -> PairedJudgement {
        let ratios = zip(candidate, baseline).compactMap { candidate, baseline in baseline > 0 && candidate >= 0 ? candidate / baseline : nil }
        let sorted = ratios.sorted()
        guard !sorted.isEmpty else { return PairedJudgement(outcome: .inconclusive, ratios: [], median: nil, low: nil, high: nil) }
        let median = Statistics.median(sorted)
        guard let k = Self.orderStatistic(count: sorted.count, confidence: confidence) else {
            // Too few pairs for any interval this sure: never a verdict.
            return PairedJudgement(outcome: .inconclusive, ratios: ratios, median: median, low: nil, high: nil)
        }
        let low = sorted[k - 1], high = sorted[sorted.count - k]
        let outcome: PairedJudgement.Outcome
        if median < threshold && high < 1 {
            outcome = .fell
        } else if median >= threshold && low > 1 - slowdown {
            outcome = .passed
        } else {
            outcome = .inconclusive
        }
        return PairedJudgement(outcome: outcome, ratios: ratios, median: median, low: low, high: high)
    }

    /// The largest k for which [x(k), x(n−k+1)] covers the median with at least `confidence`:
    /// P(Binomial(n, ½) < k) ≤ (1 − confidence) / 2 on each side. Nil when even k = 1 is not sure enough.
    public static func orderStatistic(count n: Int, confidence: Double) -> Int? {
        let tail = (1 - confidence) / 2
        var best: Int?
        var below = 0.0  // P(X ≤ k − 1), X ~ Binomial(n, ½)
        for k in 1...max(1, n / 2 + 1) {
            below += binomial(n, k - 1) / pow(2, Double(n))
            if below <= tail { best = k } else { break }
        }
        return best
    }

    static func binomial(_ n: Int, _ k: Int) -> Double {
        guard k >= 0, k <= n else { return 0 }
        var result = 1.0
        for i in 0..<min(k, n - k) { result = result * Double(n - i) / Double(i + 1) }
        return result
    }
}

/// One figure's paired judgement.
public struct PairedJudgement: Codable, Sendable, Equatable {
    public enum Outcome: String, Codable, Sendable {
        case passed
        case fell
        /// The pairs are too far apart to tell: run again.
        case inconclusive
    }

    public var outcome: Outcome
    /// Candidate ÷ baseline, pair by pair.
    public var ratios: [Double]
    public var median: Double?
    /// The confidence interval of the median ratio.
    public var low: Double?
    public var high: Double?
}
