#!/usr/bin/env python3
"""The table of scripts/bench-planted.sh: per path, how often the gate caught the planted slowdown
(the path fell) and how often it passed the unchanged build, with the medians of what was measured."""
import glob
import json
import os
import statistics
import sys

folder = sys.argv[1] if len(sys.argv) > 1 else "bench-results/planted"
order = ["append", "replay", "catch-up", "bell-page", "conversation-list", "thread-messages", "posting", "fan-out", "mail", "refresh"]
planted, unchanged = {}, {}
for path in glob.glob(os.path.join(folder, "*.json")):
    name = os.path.basename(path)
    if not (name.startswith("planted-") or name.startswith("unchanged-")):
        continue
    with open(path) as file:
        record = json.load(file)
    for result in record["results"]:
        judgement = result["judgement"]
        entry = (judgement["outcome"], judgement.get("median"), len(judgement["ratios"]))
        if name.startswith("planted-"):
            if name.startswith("planted-" + result["path"] + "-"):
                planted.setdefault(result["path"], []).append(entry)
        else:
            unchanged.setdefault(result["path"], []).append(entry)
    for failed in record.get("failures", {}):
        (planted if name.startswith("planted-") else unchanged).setdefault(failed, []).append(("failed", None, 0))


def describe(entries, right):
    if not entries:
        return "not run", "", ""
    count = sum(1 for outcome, _, _ in entries if outcome == right)
    others = {}
    for outcome, _, _ in entries:
        if outcome != right:
            others[outcome] = others.get(outcome, 0) + 1
    medians = [median for _, median, _ in entries if median is not None]
    pairs = [pairs for _, _, pairs in entries]
    wrong = ", ".join(f"{n} {outcome}" for outcome, n in sorted(others.items()))
    return (f"{count} of {len(entries)}" + (f" ({wrong})" if wrong else ""),
            f"{statistics.median(medians):.3f}" if medians else "",
            f"{min(pairs)}–{max(pairs)}" if pairs else "")


print("| path | planted slowdown caught | its median ratio | pairs | unchanged build passed | its median ratio | pairs |")
print("|---|---|---:|---|---|---:|---|")
for path in order:
    if path not in planted and path not in unchanged:
        continue
    caught, caught_median, caught_pairs = describe(planted.get(path, []), "fell")
    passed, passed_median, passed_pairs = describe(unchanged.get(path, []), "passed")
    print(f"| {path} | {caught} | {caught_median} | {caught_pairs} | {passed} | {passed_median} | {passed_pairs} |")
