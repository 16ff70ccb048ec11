"""What check_results.py and check_fs_results.py share (python3 stdlib only).

Both check a benchmark's output directory: the files it must hold, the
common fields of summary.json and its one entry per expected target.  They
collect every problem found and print them all at the end, each line
prefixed with the checker's name.
"""

import csv
import datetime
import json
import math

problems = []


def problem(message):
    problems.append(message)


def positive(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0


def check_files(out, names):
    """Every file named must be in OUT and not empty."""
    for name in names:
        path = out / name
        if not path.is_file() or path.stat().st_size == 0:
            problem(f"{name} missing or empty")


def read_data(out):
    """data.csv's rows as dicts, or None (a problem) when it cannot be read."""
    try:
        with open(out / "data.csv", newline="") as f:
            return list(csv.DictReader(f))
    except OSError as e:
        problem(f"data.csv: {e}")
        return None


def check_summary_head(out, bench, expected):
    """summary.json up to its targets: (summary, targets).

    summary is None when summary.json is not an object; targets is None
    unless it is a list, whose names must be exactly those of `expected`.
    """
    try:
        summary = json.loads((out / "summary.json").read_text())
    except (OSError, ValueError) as e:
        problem(f"summary.json does not parse: {e}")
        return None, None
    if not isinstance(summary, dict):
        problem("summary.json is not an object")
        return None, None
    if summary.get("bench") != bench:
        problem(f"bench is {summary.get('bench')!r}, not {bench!r}")
    if not isinstance(summary.get("quick"), bool):
        problem("quick is not a boolean")
    machine = summary.get("machine")
    if not (isinstance(machine, str) and "CPUs" in machine and "Linux" in machine):
        problem(f"machine is {machine!r}")
    try:
        datetime.datetime.fromisoformat(summary.get("date", ""))
    except (TypeError, ValueError):
        problem(f"date is not ISO 8601: {summary.get('date')!r}")
    targets = summary.get("targets")
    if not isinstance(targets, list):
        problem("targets is not a list")
        return summary, None
    names = [t.get("name") for t in targets if isinstance(t, dict)]
    if len(names) != len(targets) or len(set(names)) != len(names):
        problem("targets are not objects with distinct names")
    if set(names) != set(expected):
        problem(f"target names differ: missing {sorted(set(expected) - set(names))}, "
                f"unexpected {sorted(set(names) - set(expected))}")
    return summary, targets


def known_targets(targets, expected, keys):
    """(name, target) for each target named in `expected` (name -> a tuple
    whose second item is its goal text), once checked that it has every key
    of `keys` and that goal as its target."""
    for t in targets:
        if not isinstance(t, dict) or t.get("name") not in expected:
            continue
        name = t["name"]
        for key in keys:
            if key not in t:
                problem(f"{name}: no {key}")
        goal = expected[name][1]
        if t.get("target") != goal:
            problem(f"{name}: target {t.get('target')!r}, expected {goal!r}")
        yield name, t


def report(checker):
    """Prints every problem; the exit status (1 if there is any)."""
    for p in problems:
        print(f"{checker}: {p}")
    return 1 if problems else 0
