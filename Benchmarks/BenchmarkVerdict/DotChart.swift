import Encodings
import Foundation

/// A horizontal dot chart as SVG, written directly (no gnuplot): one row per figure, each round a
/// small dot, the median a larger one, the baseline's median a vertical tick, and the band a
/// figure may fall into without failing shaded from the baseline down to its threshold.
///
/// The output is a standalone, well-formed SVG document (every text escaped), to be written to a
/// file or put inline into HTML.
public struct DotChart: Sendable {
    public struct Row: Sendable {
        public var label: String
        /// This run's rounds.
        public var values: [Double]
        public var baseline: Double?
        /// The passing band: from `band.lowerBound` (the threshold) to the baseline.
        public var band: ClosedRange<Double>?
        /// Drawn in the failure colour.
        public var failed: Bool

        public init(label: String, values: [Double], baseline: Double? = nil, band: ClosedRange<Double>? = nil, failed: Bool = false) {
            self.label = label
            self.values = values
            self.baseline = baseline
            self.band = band
            self.failed = failed
        }
    }

    public var title: String
    /// Under the axis, e.g. "ratio to the same-run ceiling".
    public var axisLabel: String
    public var rows: [Row]
    /// A logarithmic axis, for rates that span orders of magnitude (`/healthz` beside a post); a
    /// linear one from 0 otherwise.
    public var logarithmic: Bool

    public init(title: String, axisLabel: String, rows: [Row], logarithmic: Bool = false) {
        self.title = title
        self.axisLabel = axisLabel
        self.rows = rows
        self.logarithmic = logarithmic
    }

    static let plotWidth = 420.0
    static let rowHeight = 26.0
    static let top = 34.0
    static let bottom = 46.0

    /// Room for the longest label, at about 6.6 px a character of 12 px sans-serif.
    var labelWidth: Double { max(200, Double(rows.map(\.label.count).max() ?? 0) * 6.6 + 16) }

    public var svg: String {
        let labelWidth = labelWidth
        let width = labelWidth + Self.plotWidth + 30
        let height = Self.top + Double(max(rows.count, 1)) * Self.rowHeight + Self.bottom
        let values = rows.flatMap { $0.values + ($0.baseline.map { [$0] } ?? []) }.filter { $0.isFinite && $0 > 0 }
        let maximum = Self.niceCeiling(values.max() ?? 1)
        // A log axis starts at the power of ten at or below the smallest value.
        let minimum = logarithmic ? pow(10, log10(values.min() ?? 1).rounded(.down)) : 0
        let decades = log10(maximum / max(minimum, .leastNonzeroMagnitude))
        func x(_ value: Double) -> Double {
            guard logarithmic else { return labelWidth + value / maximum * Self.plotWidth }
            let clamped = min(max(value, minimum), maximum)
            return labelWidth + (decades > 0 ? log10(clamped / minimum) / decades : 0) * Self.plotWidth
        }
        var parts = [
            #"<svg xmlns="http://www.w3.org/2000/svg" width="\#(Self.number(width))" height="\#(Self.number(height))" viewBox="0 0 \#(Self.number(width)) \#(Self.number(height))" font-family="sans-serif" font-size="12">"#,
            #"<rect width="100%" height="100%" fill="white"/>"#,
            #"<text x="10" y="20" font-size="14" font-weight="bold">\#(Self.escape(title))</text>"#,
        ]
        let axisY = Self.top + Double(rows.count) * Self.rowHeight
        // Grid and ticks: five steps from 0 to the maximum, or 1, 2 and 5 of every decade.
        var ticks: [Double] = []
        if logarithmic {
            for decade in 0...Int(decades.rounded(.up)) {
                let power = minimum * pow(10, Double(decade))
                for step: Double in [1, 2, 5] where step * power <= maximum * 1.0001 { ticks.append(step * power) }
            }
        } else {
            for step in 0...5 { ticks.append(maximum * Double(step) / 5) }
        }
        for value in ticks {
            let position = Self.number(x(value))
            parts.append(#"<line x1="\#(position)" y1="\#(Self.number(Self.top))" x2="\#(position)" y2="\#(Self.number(axisY))" stroke="rgb(224,224,224)"/>"#)
            parts.append(#"<text x="\#(position)" y="\#(Self.number(axisY + 16))" text-anchor="middle" fill="rgb(68,68,68)">\#(Self.escape(Self.tick(value)))</text>"#)
        }
        parts.append(
            #"<text x="\#(Self.number(labelWidth + Self.plotWidth / 2))" y="\#(Self.number(axisY + 36))" text-anchor="middle" fill="rgb(68,68,68)">\#(Self.escape(axisLabel))</text>"#)
        for (index, row) in rows.enumerated() {
            let middle = Self.top + (Double(index) + 0.5) * Self.rowHeight
            let colour = row.failed ? "rgb(198,40,40)" : "rgb(21,101,192)"
            parts.append(
                #"<text x="\#(Self.number(labelWidth - 8))" y="\#(Self.number(middle + 4))" text-anchor="end"\#(row.failed ? #" fill="rgb(198,40,40)" font-weight="bold""# : "")>\#(Self.escape(row.label))</text>"#)
            if let band = row.band {
                parts.append(
                    #"<rect x="\#(Self.number(x(band.lowerBound)))" y="\#(Self.number(middle - 9))" width="\#(Self.number(max(0, x(band.upperBound) - x(band.lowerBound))))" height="18" fill="rgb(200,230,201)"/>"#)
            }
            if let baseline = row.baseline {
                parts.append(
                    #"<line x1="\#(Self.number(x(baseline)))" y1="\#(Self.number(middle - 11))" x2="\#(Self.number(x(baseline)))" y2="\#(Self.number(middle + 11))" stroke="rgb(51,51,51)" stroke-width="2"/>"#)
            }
            for value in row.values {
                parts.append(#"<circle cx="\#(Self.number(x(value)))" cy="\#(Self.number(middle))" r="3" fill="\#(colour)" fill-opacity="0.45"/>"#)
            }
            if !row.values.isEmpty {
                let median = Statistics.median(row.values)
                parts.append(#"<circle cx="\#(Self.number(x(median)))" cy="\#(Self.number(middle))" r="5.5" fill="none" stroke="\#(colour)" stroke-width="2"/>"#)
            }
        }
        parts.append("</svg>")
        return parts.joined(separator: "\n") + "\n"
    }

    /// The legend, for the text beside the charts.
    public static let legend =
        "small dots: this run's rounds; ring: their median; black tick: the baseline's median; green band: where a gated figure passes (the baseline less the margin)"

    /// Escapes the five characters XML gives a meaning to (`HTML.escape`).
    public static func escape(_ text: String) -> String { HTML.escape(text) }

    /// 1, 2 or 5 times a power of ten, at or above `value`: an axis that ends on a round number.
    static func niceCeiling(_ value: Double) -> Double {
        guard value.isFinite, value > 0 else { return 1 }
        let power = pow(10, (log10(value)).rounded(.down))
        for step in [1.0, 2, 5, 10] where step * power >= value { return step * power }
        return 10 * power
    }

    static func tick(_ value: Double) -> String {
        if value == 0 { return "0" }
        if value >= 10_000 { return String(format: "%.0fk", value / 1000) }
        if value >= 10 { return String(format: "%.0f", value) }
        if value >= 1 { return String(format: "%.1f", value) }
        return String(format: "%.2f", value)
    }

    static func number(_ value: Double) -> String { String(format: "%.1f", value.isFinite ? value : 0) }
}
