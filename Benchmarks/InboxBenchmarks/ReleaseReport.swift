import BenchmarkVerdict
import Foundation

/// The page a person reads after `inbox-bench release`: the verdict first, then per benchmark a
/// plot of each gated ratio against the baseline with its margin, a plot of the absolute rates
/// with every round, and the table; the machine, PostgreSQL and the commit at the top. Written as
/// `index.html` beside the SVG files it shows, `release.json` (the record, for machines) and each
/// benchmark's own JSON.
struct ReleaseReport {
    var record: ReleaseRecord
    var baseline: Baseline?

    /// Writes everything into `directory` (created); returns the page's and the JSON's paths.
    func write(to directory: String) throws -> (html: String, json: String) {
        let folder = URL(fileURLWithPath: directory, isDirectory: true)
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        for report in record.reports {
            try report.writeJSON(to: folder.appendingPathComponent("\(report.benchmark).json").path)
        }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        let json = folder.appendingPathComponent("release.json")
        try encoder.encode(record).write(to: json, options: .atomic)
        for (name, chart) in charts {
            try Data(chart.svg.utf8).write(to: folder.appendingPathComponent(name), options: .atomic)
        }
        let html = folder.appendingPathComponent("index.html")
        try Data(page.utf8).write(to: html, options: .atomic)
        return (html.path, json.path)
    }

    private var verdicts: [String: FigureVerdict] {
        Dictionary((record.verdict?.figures ?? []).map { ($0.id, $0) }, uniquingKeysWith: { first, _ in first })
    }

    private var baselineFigures: [String: ReleaseFigure] {
        Dictionary((baseline?.figures ?? []).map { ($0.id, $0) }, uniquingKeysWith: { first, _ in first })
    }

    /// `ratios-http.svg` and `rates-http.svg` for each benchmark (ratios only where it has gated figures).
    var charts: [(String, DotChart)] {
        let verdicts = verdicts
        let before = baselineFigures
        var charts: [(String, DotChart)] = []
        for report in record.reports {
            let figures = record.figures.filter { $0.benchmark == report.benchmark }
            let gated = figures.filter(\.isGated)
            if !gated.isEmpty {
                let rows = gated.map { figure in
                    let verdict = verdicts[figure.id]
                    let band = verdict.flatMap { verdict in
                        verdict.threshold.flatMap { low in verdict.baselineRatio.map { low...max(low, $0) } }
                    }
                    return DotChart.Row(
                        label: figure.title, values: figure.ratios ?? [], baseline: verdict?.baselineRatio, band: band,
                        failed: verdict?.outcome == .fell)
                }
                // Ratios an order of magnitude apart (a post beside a cached page) on a log axis, so
                // that the small ones' band is as visible as the large ones'.
                let medians = gated.compactMap(\.medianRatio).filter { $0 > 0 }
                let spansDecades = (medians.max() ?? 1) / (medians.min() ?? 1) > 10
                let ceilings = Set(gated.compactMap(\.ceiling))
                let axis = ceilings.count == 1 ? "× \(ceilings.first ?? "")" : "× the row's ceiling (the table below names it)"
                charts.append(
                    ("ratios-\(report.benchmark).svg", DotChart(
                            title: "\(report.benchmark): ratio to the same-run ceiling (gated)", axisLabel: axis + (spansDecades ? " (logarithmic)" : ""),
                            rows: rows, logarithmic: spansDecades)))
            }
            let rows = figures.map { figure in
                DotChart.Row(label: figure.title, values: figure.rates, baseline: before[figure.id]?.medianRate)
            }
            charts.append(
                ("rates-\(report.benchmark).svg", DotChart(title: "\(report.benchmark): \(report.unit) per second (reported, not gated)", axisLabel: "\(report.unit)/s (logarithmic)", rows: rows, logarithmic: true)))
        }
        return charts
    }

    var page: String {
        let verdict = record.verdict
        let answer: String
        if !record.failures.isEmpty {
            answer = "NOT COMPLETE: \(record.failures.keys.sorted().joined(separator: ", ")) could not run"
        } else if let gate = record.gate {
            answer = gate.status == 0 ? "PASSED" : gate.answer
        } else if let verdict {
            answer = verdict.answer
        } else {
            answer = "no baseline to judge against"
        }
        let colour = answer == "PASSED" ? "#2e7d32" : "#c62828"
        var html = [
            "<!DOCTYPE html>", "<html lang=\"en\"><head><meta charset=\"utf-8\">",
            "<title>inbox-bench release \(escape(record.commit))</title>",
            """
            <style>
            body { font-family: sans-serif; max-width: 1100px; margin: 2em auto; padding: 0 1em; color: #222; }
            table { border-collapse: collapse; margin: 1em 0; font-size: 14px; }
            th, td { border: 1px solid #ccc; padding: 4px 8px; text-align: left; vertical-align: top; }
            td.n { text-align: right; font-variant-numeric: tabular-nums; }
            tr.fell td { background: #ffebee; } tr.missing td { background: #fff3e0; } tr.inconclusive td { background: #fffde7; }
            .answer { font-size: 1.6em; font-weight: bold; color: \(colour); }
            .small { color: #555; font-size: 13px; }
            </style></head><body>
            """,
            "<h1>Release benchmark</h1>",
            "<p class=\"answer\">\(escape(answer))</p>",
            "<table>",
            row("commit", record.commit), row("date", record.date),
            row("time", ReleasePlan.format(seconds: record.totalSeconds) + " (" + record.steps.sorted { $0.key < $1.key }.map { "\($0.key) \(ReleasePlan.format(seconds: $0.value))" }.joined(separator: ", ") + ")"),
            row("machine", record.machineLine), row("PostgreSQL", record.postgresLine),
            row("plan", record.plan.joined(separator: "; ")),
            row(
                "baseline",
                baseline.map { "\(record.baselinePath ?? "") of \($0.commit), \($0.date); \($0.machine); \($0.plan.joined(separator: "; "))" } ?? "none"),
            row("rule", record.rule.statement),
            "</table>",
        ]
        for (benchmark, error) in record.failures.sorted(by: { $0.key < $1.key }) {
            html.append("<p><b>\(escape(benchmark)) could not run:</b> \(escape(error))</p>")
        }
        if let gate = record.gate {
            html.append("<h2>The gate: this build against the baseline's, A B A B</h2>")
            html.append("<p class=\"small\">\(escape(gate.rule.statement)); \(String(format: "%.0f", gate.seconds)) s. \(escape(gate.answer))</p>")
            html.append("<table><tr><th>path</th><th>configuration</th><th>candidate ÷ baseline (median)</th><th>interval</th><th>pairs' ratios</th><th>outcome</th></tr>")
            for result in gate.results {
                let judgement = result.judgement
                let outcome = judgement.outcome.rawValue
                html.append(
                    "<tr class=\"\(outcome)\"><td>\(escape(result.path))</td><td>\(escape(result.benchmark))/\(escape(result.configuration))</td>"
                        + "<td class=\"n\">\(ratio(judgement.median))</td><td class=\"n\">\(result.interval ?? "")</td>"
                        + "<td class=\"n\">\(judgement.ratios.map { String(format: "%.2f", $0) }.joined(separator: ", "))</td><td>\(outcome)</td></tr>")
            }
            for (path, error) in gate.failures.sorted(by: { $0.key < $1.key }) {
                html.append("<tr class=\"fell\"><td>\(escape(path))</td><td colspan=\"5\">could not run: \(escape(error))</td></tr>")
            }
            html.append("</table>")
        }
        if let verdict {
            html.append("<h2>\(record.gate == nil ? "Gated figures" : "Compared with the baseline's figures (for the report; the gate decides)"): ratio to the same-run ceiling</h2>")
            html.append(
                "<table><tr><th>figure</th><th>ceiling</th><th>this run (median)</th><th>rounds</th><th>baseline</th><th>margin</th><th>passes from</th><th>outcome</th></tr>")
            let figures = Dictionary(record.figures.map { ($0.id, $0) }, uniquingKeysWith: { first, _ in first })
            for judged in verdict.figures {
                let rounds = figures[judged.id]?.ratios.map { $0.map { String(format: "%.3f", $0) }.joined(separator: ", ") } ?? ""
                html.append(
                    "<tr class=\"\(judged.outcome.rawValue)\"><td>\(escape(judged.id))<br><span class=\"small\">\(escape(judged.title))</span></td>"
                        + "<td>\(escape(judged.ceiling ?? ""))</td><td class=\"n\">\(ratio(judged.ratio))</td><td class=\"n\">\(rounds)</td>"
                        + "<td class=\"n\">\(ratio(judged.baselineRatio))</td><td class=\"n\">\(judged.margin.map { String(format: "%.0f %%", $0 * 100) } ?? "")</td>"
                        + "<td class=\"n\">\(ratio(judged.threshold))</td><td>\(judged.outcome.rawValue)</td></tr>")
            }
            html.append("</table>")
        }
        html.append("<p class=\"small\">Plots: \(escape(DotChart.legend)).</p>")
        let charts = Dictionary(charts.map { ($0.0, $0.1) }, uniquingKeysWith: { first, _ in first })
        let before = baselineFigures
        for report in record.reports {
            html.append("<h2>\(escape(report.benchmark))</h2>")
            for name in ["ratios-\(report.benchmark).svg", "rates-\(report.benchmark).svg"] where charts[name] != nil {
                html.append("<p><img src=\"\(name)\" alt=\"\(escape(charts[name]?.title ?? name))\"></p>")
            }
            let latencies = report.hasLatencies
            html.append(
                "<table><tr><th>configuration</th><th>\(escape(report.unit))/s (median)</th><th>rounds</th>"
                    + (latencies ? "<th>p50 / p99 / p99.9 per round</th>" : "") + "<th>baseline median</th><th>vs ceiling</th></tr>")
            for configuration in report.configurations {
                let id = "\(report.benchmark)/\(configuration.id)"
                let rounds = configuration.rounds.map { formatGrouped($0.eventsPerSecond) }.joined(separator: ", ")
                let latency = configuration.rounds.compactMap(\.latency).map {
                    "\(RunReport.milliseconds($0.p50)) / \(RunReport.milliseconds($0.p99)) / \(RunReport.milliseconds($0.p999))"
                }.joined(separator: "<br>")
                let versus = configuration.ratioToServerSide.map { String(format: "%.3f", $0) } ?? (configuration.kind == .serverSide ? "ceiling" : configuration.kind == .paced ? "paced, not compared" : configuration.kind == .probe ? "the machine, not compared" : "")
                html.append(
                    "<tr><td>\(escape(configuration.title))</td><td class=\"n\">\(formatGrouped(configuration.medianEventsPerSecond))</td>"
                        + "<td class=\"n\">\(rounds)</td>" + (latencies ? "<td class=\"n\">\(latency)</td>" : "")
                        + "<td class=\"n\">\(before[id].map { formatGrouped($0.medianRate) } ?? "")</td><td class=\"n\">\(versus)</td></tr>")
            }
            html.append("</table>")
            if !report.notes.isEmpty {
                html.append("<details><summary>notes</summary><table>")
                for (key, value) in report.notes.sorted(by: { $0.key < $1.key }) { html.append(row(key, value)) }
                html.append("</table></details>")
            }
        }
        html.append("<p class=\"small\">The figures for machines: <a href=\"release.json\">release.json</a> and each benchmark's JSON beside it.</p>")
        html.append("</body></html>")
        return html.joined(separator: "\n") + "\n"
    }

    private func row(_ name: String, _ value: String) -> String { "<tr><th>\(escape(name))</th><td>\(escape(value))</td></tr>" }
    private func ratio(_ value: Double?) -> String { value.map { String(format: "%.3f", $0) } ?? "" }
    private func escape(_ text: String) -> String { DotChart.escape(text) }
}
