#!/usr/bin/python3
"""Checks what bench/net/run wrote (used by bench_test).

    check_results.py OUT --ran raw,mpi [--bmi NAME=STATE ...]

OUT must hold data.csv, summary.md, summary.json and the plots; every driver
in --ran must have positive results for every point of every pattern in
data.csv; summary.json must have exactly one entry per target, each with
computed fields (ratio = value / baseline, met from the ratio and the goal).
STATE says what the targets of a BMI driver must show: ran (numbers),
missing ("driver NAME not built") or skipped ("driver NAME skipped: ...").
Prints every problem found and exits 1 if there is any.
"""

import argparse
import re
import sys
from pathlib import Path

from check_common import (check_files, check_summary_head, known_targets, positive, problem,
                          read_data, report)

BW_SIZES = (100, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216)
LAT_LABELS = ("4B", "64B", "1KiB", "4KiB", "16KiB", "64KiB")
LAT_SIZES = (4, 64, 1024, 4096, 16384, 65536)
REPLIES = (10240, 102400)
REPS = 3
ENGINES = ("bmi-epoll", "bmi-uring")
FILES = ("data.csv", "summary.md", "summary.json", "bandwidth.png", "latency.png",
         "many-to-one.png", "cpu.png")

def expected_targets():
    """name -> (baseline driver, goal)"""
    names = {}
    for e in ENGINES:
        names[f"{e} bandwidth >=64KiB vs raw"] = ("raw", ">= 0.95")
        for regime in ("", " one CPU"):
            for label in LAT_LABELS:
                names[f"{e} latency{regime} {label} vs raw"] = ("raw", "<= 1.10")
                if not regime:  # MPICH is not run on one CPU
                    names[f"{e} latency{regime} {label} vs mpi"] = ("mpi", "<= 1.00")
        for label in ("10KiB", "100KiB"):
            names[f"{e} many-to-one {label} max/avg vs mpi"] = ("mpi", "<= 1.00")
    return names


def check_summary(out, ran, bmi):
    expected = expected_targets()
    summary, targets = check_summary_head(out, "net", expected)
    if targets is None:
        return summary
    for name, t in known_targets(targets, expected,
                                 ("value", "baseline", "unit", "ratio", "target", "met")):
        base_driver, goal = expected[name]
        engine = name.split()[0]
        if not isinstance(t.get("met"), bool):
            problem(f"{name}: met is not a boolean")
        if not isinstance(t.get("unit"), str) or not t.get("unit"):
            problem(f"{name}: no unit")
        value, baseline, ratio = t.get("value"), t.get("baseline"), t.get("ratio")
        # the baseline: a number when its driver ran
        if base_driver in ran and not positive(baseline):
            problem(f"{name}: baseline {baseline!r} is not a positive number")
        if base_driver not in ran and (baseline is not None or "note" not in t):
            problem(f"{name}: baseline driver {base_driver} did not run, yet baseline is "
                    f"{baseline!r} (note {t.get('note')!r})")
        # the value: what the BMI driver's state says
        state = bmi.get(engine, "missing")
        note = t.get("note", "")
        if state == "ran" and not positive(value):
            problem(f"{name}: value {value!r} is not a positive number")
        if state == "missing" and (value is not None or f"driver {engine} not built" not in note):
            problem(f"{name}: value {value!r}, note {note!r}; expected null and "
                    f"'driver {engine} not built'")
        if state == "skipped" and (value is not None or f"driver {engine} skipped" not in note):
            problem(f"{name}: value {value!r}, note {note!r}; expected null and "
                    f"'driver {engine} skipped'")
        # computed, never typed in
        if positive(value) and positive(baseline):
            if not positive(ratio) or abs(ratio - value / baseline) > 1e-3 * (value / baseline):
                problem(f"{name}: ratio {ratio!r} is not value / baseline = "
                        f"{value / baseline:.4f}")
            else:
                op, bound = goal.split()
                met = ratio >= float(bound) if op == ">=" else ratio <= float(bound)
                if t.get("met") is not met:
                    problem(f"{name}: met is {t.get('met')!r} with ratio {ratio} {goal}")
        else:
            if ratio is not None or t.get("met") is not False:
                problem(f"{name}: ratio {ratio!r} / met {t.get('met')!r} without both numbers")
            if not note:
                problem(f"{name}: a number is missing and there is no note saying why")
    return summary


def check_data(out, ran, quick):
    clients = (2, 8) if quick else (2, 4, 8, 16, 32, 64)
    rows = read_data(out)
    if rows is None:
        return
    for driver in ran:
        mine = [r for r in rows if r["driver"] == driver]
        expect = {
            "bw": {(str(s), "", str(rep)) for s in BW_SIZES for rep in range(REPS)},
            "lat": {(str(s), "", str(rep)) for s in LAT_SIZES for rep in range(REPS)},
            "m2o": {(str(s), str(n), str(rep)) for s in REPLIES for n in clients
                    for rep in range(REPS)},
        }
        for pattern, keys in expect.items():
            got = [(r["size"], r["clients"], r["rep"]) for r in mine if r["pattern"] == pattern]
            if sorted(got) != sorted(keys):
                problem(f"data.csv: {driver} {pattern}: {len(got)} rows, expected {len(keys)} "
                        f"(one per size or clients and repetition)")
            for r in mine:
                if r["pattern"] != pattern:
                    continue
                for key in ("value", "seconds") + (("cpu_s_per_gib",) if pattern == "bw" else
                                                   ("fairness",) if pattern == "m2o" else ()):
                    try:
                        ok = positive(float(r[key]))
                    except ValueError:
                        ok = False
                    if not ok:
                        problem(f"data.csv: {driver} {pattern} {r['size']} rep {r['rep']}: "
                                f"{key} = {r[key]!r}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--ran", required=True, help="drivers that must have results")
    ap.add_argument("--bmi", action="append", default=[], help="NAME=ran|missing|skipped")
    args = ap.parse_args()
    ran = [d for d in args.ran.split(",") if d]
    bmi = dict(x.split("=", 1) for x in args.bmi)
    check_files(args.out, FILES)
    summary = check_summary(args.out, ran, bmi)
    check_data(args.out, ran, bool(summary and summary.get("quick")))
    try:
        md = (args.out / "summary.md").read_text()
        for driver in ran:
            if not re.search(rf"^\| {re.escape(driver)} \| ran ", md, re.M):
                problem(f"summary.md does not list driver {driver} as ran")
        if "## Targets" not in md:
            problem("summary.md has no Targets section")
    except OSError:
        pass
    return report("check_results")


if __name__ == "__main__":
    sys.exit(main())
