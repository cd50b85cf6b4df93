#!/usr/bin/python3
"""The figure tables of docs/benchmarks.md, in Markdown, from one release run's JSON.

    scripts/bench-tables.py bench-results/release/release.json > tables.md

The input is the `release.json` that `inbox-bench release` writes (`make bench-release`,
`make bench-baseline`): a `ReleaseRecord` (Benchmarks/InboxBenchmarks/ReleaseCommand.swift) holding
every benchmark's `RunReport` (Report.swift). The first line names the commit, the date, the
machine, PostgreSQL and the run's total time; then one section per benchmark of the record, each a
heading and one table of medians over the rounds: the rate, its min and max, the ratio to the
same-run ceiling (the median of the rounds' ratios; no column for a benchmark without a ceiling),
and for the rows with latencies (http, identity) the medians of each round's p50, p99 and p99.9.
The first line goes under `<!-- FIGURES run -->` in docs/benchmarks.md, each section under its
benchmark's `<!-- FIGURES name -->`. Python 3's standard library only.
"""

import json
import math
import sys


def median(values):
    ordered = sorted(values)
    if not ordered:
        return None
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def grouped(value):
    """12345.6 -> "12,346" (halves away from zero, as inbox-bench's own tables)."""
    if value is None or not math.isfinite(value):
        return "-"
    return f"{int(math.copysign(math.floor(abs(value) + 0.5), value)):,}"


def duration(seconds):
    """754 -> "12m 34s", as inbox-bench's progress lines."""
    whole = int(round(seconds))
    return f"{whole // 60}m {whole % 60:02d}s" if whole >= 60 else f"{whole}s"


def milliseconds(seconds):
    return "" if seconds is None else f"{seconds * 1000:.2f}"


def cell(text):
    return str(text).replace("|", "\\|")


def machine_line(record):
    """ReleaseRecord.machineLine and postgresLine, from the first report."""
    reports = record.get("reports") or []
    if not reports:
        return "machine unknown"
    machine, postgres = reports[0]["machine"], reports[0]["postgres"]
    memory = machine["physicalMemory"] / 1_073_741_824
    version = " ".join(postgres["version"].split(" ")[:2])
    settings = ", ".join(f"{name}={value}" for name, value in sorted(postgres.get("settings", {}).items()))
    kind = "embedded" if postgres.get("embedded") else "DATABASE_URL"
    cpu = machine.get("cpuModel") or "CPU unknown"
    return (f"{machine['activeProcessorCount']} cores, {memory:.1f} GiB, {cpu}, {machine['operatingSystem']}; "
            f"{version} ({kind}): {settings}")


def section(report, record):
    configurations = report["configurations"]
    ceilings = {c["ceilingId"] for c in configurations if c.get("ceilingId")}
    latencies = any(r.get("latency") for c in configurations for r in c["rounds"])
    seconds = (record.get("steps") or {}).get(report["benchmark"])
    plan = f"scale {report['scale']:g}, {report['rounds']} round{'' if report['rounds'] == 1 else 's'}"
    lines = [f"#### {report['benchmark']} — {record['commit']}, {report['date']} "
             f"({plan}{', ' + duration(seconds) if seconds is not None else ''})", ""]
    header = ["configuration", f"{report['unit']}/s (median)", "min", "max"]
    header += ["vs ceiling"] if ceilings else []
    if latencies:
        header += ["p50 ms", "p99 ms", "p99.9 ms"]
    lines.append("| " + " | ".join(header) + " |")
    lines.append("|---|" + "---:|" * (len(header) - 1))
    for configuration in configurations:
        rates = [r["eventsPerSecond"] for r in configuration["rounds"]]
        if configuration["id"] in ceilings:
            ratio = "ceiling"
        elif configuration.get("ratiosPerRound"):
            ratio = f"{median(configuration['ratiosPerRound']):.3f}"
        else:
            ratio = ""
        middle, low, high = median(rates), min(rates, default=None), max(rates, default=None)
        row = [cell(configuration["title"]), grouped(middle), grouped(low), grouped(high)]
        row += [ratio] if ceilings else []
        if latencies:
            measured = [r["latency"] for r in configuration["rounds"] if r.get("latency")]
            row += [milliseconds(median([m[key] for m in measured])) for key in ("p50", "p99", "p999")]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def main(arguments):
    if arguments in (["-h"], ["--help"]):
        print(__doc__.strip())
        return 0
    if len(arguments) != 1:
        print("usage: scripts/bench-tables.py RELEASE_JSON", file=sys.stderr)
        return 2
    try:
        with open(arguments[0], encoding="utf-8") as file:
            record = json.load(file)
    except (OSError, ValueError) as error:
        print(f"bench-tables: cannot read {arguments[0]}: {error}", file=sys.stderr)
        return 1
    total = duration(record.get("totalSeconds", 0))
    print(f"Commit {record['commit']}, {record['date']}, {total} in all; {machine_line(record)}")
    for benchmark, error in sorted((record.get("failures") or {}).items()):
        print(f"\n{benchmark} could not run: {error}")
    for report in record.get("reports") or []:
        print()
        print(section(report, record))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
