#!/usr/bin/python3
"""Checks what bench/fs/run wrote (used by fs_test).

    check_fs_results.py OUT [--profiles]

OUT must hold data.csv, summary.md, summary.json and the plots; data.csv must
have a positive result for every point and repetition of every phase;
summary.json must have exactly one entry per target of the issue, each with
numeric value and baseline and computed fields (ratio = value / baseline;
met from the ratio or, for the absolute goals, from the value).  The FUSE
phase's rows and targets must be there unless summary.json says why the
phase was skipped (fuse_skipped, and a note in summary.md).  With
--profiles, out/profiles/ must hold both perf profiles, linked from
summary.md.  Prints every problem found and exits 1 if there is any.
"""

import argparse
import csv
import json
import statistics
import sys
from pathlib import Path

from check_common import (check_files, check_summary_head, known_targets, positive, problem,
                          read_data, report)

REPS = 3
CLIENTS = (1, 2, 4)
STRIPES = (1, 2, 4)
MD_CLIENTS = (1, 4)
HOLD_CLIENTS = (1, 4)
MAC_CLIENTS = (4,)  # chunk MACs on/off pairs, S = DATA_SERVERS
DATA_SERVERS = 4
COMPARE_FEATURES = ("same", "reply-cache", "hold")
COMPARE_PAIRS = 20
FILES = ("data.csv", "pairs.csv", "summary.md", "summary.json", "invocations.csv", "cpu.csv", "bench.png",
         "mdtest.png")
PROFILES = ("bench-C4-S4-write.txt", "mdtest-C1-create.txt")
FUSE_GOAL = 0.50
FUSE_SIDES = {"write": ("fuse", "library", "fuse-nowrite_behind"), "read": ("fuse", "library"),
              "ls -l": ("fuse", "library", "fuse-nordirplus")}


def fuse_state(out):
    """(skipped reason or None, files per listed directory) from summary.json."""
    try:
        summary = json.loads((out / "summary.json").read_text())
    except (OSError, ValueError):
        return None, 200
    if not isinstance(summary, dict):
        return None, 200
    skipped = summary.get("fuse_skipped")
    if skipped is not None and (not isinstance(skipped, str) or not skipped):
        problem(f"summary.json: fuse_skipped {skipped!r} is not a reason")
    return skipped, 200 if summary.get("quick") else 1000


def fuse_targets(files):
    """name -> (compare, goal text, bound, the ratio's (op, on, off))"""
    return {
        "FUSE/library sequential write": ("ratio", ">= 0.50", FUSE_GOAL,
                                          ("write", "fuse", "library")),
        "FUSE/library sequential read": ("ratio", ">= 0.50", FUSE_GOAL,
                                         ("read", "fuse", "library")),
        "FUSE sequential write, write-behind on/off": ("ratio", ">= 1.00", 1.0,
                                                       ("write", "fuse", "fuse-nowrite_behind")),
        f"FUSE/library ls -l of {files} files": ("ratio", ">= 0.50", FUSE_GOAL,
                                                 ("ls -l", "fuse", "library")),
        f"FUSE ls -l of {files} files, readdirplus on/off": ("ratio", ">= 1.00", 1.0,
                                                             ("ls -l", "fuse",
                                                              "fuse-nordirplus")),
    }


def expected_targets(fuse_files=None):
    """name -> (compare, goal text, bound); the FUSE phase's unless
    fuse_files is None (skipped)."""
    names = {}
    if fuse_files is not None:
        names.update({k: v[:3] for k, v in fuse_targets(fuse_files).items()})
    for op in ("write", "read"):
        for s in (2, 4):
            for c in CLIENTS:
                names[f"aggregate {op} C={c} S={s} vs min(tcp, tmpfs)"] = ("ratio", ">= 0.70",
                                                                          0.70)
    for op in ("in", "out"):
        names[f"pvfs-cp 1GiB {op}"] = ("value", ">= 600 MiB/s", 600.0)
    for suffix in ("", " --separate"):
        names[f"creates/s 1 client durable{suffix}"] = ("value", ">= 1500", 1500.0)
        names[f"creates/s 4 clients durable{suffix}"] = ("value", ">= 4000", 4000.0)
    for c in MD_CLIENTS:
        for op in ("create", "remove"):
            names[f"{op}s/s C={c}, reply cache on/off"] = ("ratio", ">= 0.95", 0.95)
        names[f"creates/s C={c}, open references on/off"] = ("ratio", ">= 0.95", 0.95)
    for c in HOLD_CLIENTS:
        names[f"write MB/s C={c} S={DATA_SERVERS}, open references on/off"] = ("ratio", ">= 0.95",
                                                                              0.95)
    for c in MAC_CLIENTS:
        for op in ("write", "read"):
            names[f"{op} MB/s C={c} S={DATA_SERVERS}, chunk MACs on/off"] = ("ratio", ">= 0.95",
                                                                            0.95)
    return names


def paired_ratio(rows, match, on, off):
    """The median over repetitions of data.csv's value of target `on` / target
    `off`, among the rows whose (phase, what, op, clients) is `match`."""
    by = {}
    for r in rows or []:
        if (r.get("phase"), r.get("what"), r.get("op"), r.get("clients")) == match:
            try:
                by.setdefault(r.get("rep"), {})[r.get("target")] = float(r.get("value"))
            except (TypeError, ValueError):
                pass
    ratios = [v[on] / v[off] for v in by.values() if positive(v.get(on)) and positive(v.get(off))]
    return statistics.median(ratios) if ratios else None


def read_pairs(out):
    """pairs.csv's rows, each ratio checked against its two times."""
    try:
        with open(out / "pairs.csv", newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as e:
        problem(f"pairs.csv: {e}")
        return []
    for r in rows:
        try:
            on, off, ratio = (float(r[k]) for k in ("on_seconds", "off_seconds", "ratio"))
        except (KeyError, TypeError, ValueError):
            problem(f"pairs.csv: a row lacks numbers: {r}")
            continue
        if not (positive(on) and positive(off)) or abs(ratio - off / on) > 1e-6 * ratio:
            problem(f"pairs.csv: ratio {ratio} is not off / on = {off} / {on}")
    return rows


def pair_median(pairs, what, op, c):
    ratios = [float(r["ratio"]) for r in pairs
              if (r.get("what"), r.get("op"), r.get("clients")) == (what, op, c)]
    return statistics.median(ratios) if ratios else None


def paired_of(name, rows, pairs, fuse_files):
    """For a target computed from pairs: the median ratio data.csv or
    pairs.csv gives; else (False, None)."""
    if name.startswith("FUSE"):
        op, on, off = fuse_targets(fuse_files)[name][3]
        return True, paired_ratio(rows, ("fuse", "tmpfs", op, ""), on, off)
    if "reply cache" in name:
        op, c = name.split("s/s C=")[0], name.split("C=")[1].split(",")[0]
        return True, pair_median(pairs, "reply-cache", op, c)
    if name.startswith("creates/s") and "open references" in name:
        c = name.split("C=")[1].split(",")[0]
        return True, pair_median(pairs, "hold", "create", c)
    if "chunk MACs" in name:
        op, c = name.split(" ")[0], name.split("C=")[1].split(" ")[0]
        return True, paired_ratio(rows, ("pvfs-bench-macs", "pvfs", op, c), "macs", "none")
    if "open references" in name:
        c = name.split("C=")[1].split(" ")[0]
        return True, paired_ratio(rows, ("pvfs-bench-hold", "pvfs", "write", c), "hold", "plain")
    return False, None


def check_summary(out):
    skipped, files = fuse_state(out)
    expected = expected_targets(None if skipped else files)
    rows = read_data(out)
    pairs = read_pairs(out)
    for feature in COMPARE_FEATURES:
        for op in ("create",) if feature == "hold" else ("create", "remove"):
            for c in MD_CLIENTS:
                n = sum(1 for r in pairs
                        if (r.get("what"), r.get("op"), r.get("clients")) == (feature, op, str(c)))
                if n != REPS * COMPARE_PAIRS:
                    problem(f"pairs.csv: {n} pairs of {feature} {op} C={c}, expected "
                            f"{REPS * COMPARE_PAIRS}")
    summary, targets = check_summary_head(out, "fs", expected)
    if targets is None:
        return summary
    for name, t in known_targets(
            targets, expected, ("value", "baseline", "unit", "ratio", "target", "compare", "met")):
        compare, goal, bound = expected[name]
        if t.get("compare") != compare:
            problem(f"{name}: compare {t.get('compare')!r}, expected {compare!r}")
        if not isinstance(t.get("unit"), str) or not t.get("unit"):
            problem(f"{name}: no unit")
        value, baseline, ratio = t.get("value"), t.get("baseline"), t.get("ratio")
        if not positive(value):
            problem(f"{name}: value {value!r} is not a positive number")
        if not positive(baseline):
            problem(f"{name}: baseline {baseline!r} is not a positive number")
        if not isinstance(t.get("met"), bool):
            problem(f"{name}: met is not a boolean")
        if not (positive(value) and positive(baseline)):
            continue
        paired, want = paired_of(name, rows, pairs, files)
        if paired:
            # The median of the per-repetition ratios, not value / baseline.
            if want is None or not positive(ratio) or abs(ratio - want) > 1e-3 * want:
                problem(f"{name}: ratio {ratio!r} is not the median per-repetition ratio {want}")
                continue
        elif not positive(ratio) or abs(ratio - value / baseline) > 1e-3 * (value / baseline):
            problem(f"{name}: ratio {ratio!r} is not value / baseline = {value / baseline:.4f}")
            continue
        met = (ratio if compare == "ratio" else value) >= bound
        if t.get("met") is not met:
            problem(f"{name}: met is {t.get('met')!r}, but {compare} "
                    f"{ratio if compare == 'ratio' else value} {goal}")
    return summary


def check_data(out):
    rows = read_data(out)
    if rows is None:
        return
    expect = {}  # (phase, what, target, op, clients, stripes) -> reps
    if fuse_state(out)[0] is None:
        for op, sides in FUSE_SIDES.items():
            for side in sides:
                expect[("fuse", "tmpfs", side, op, "", "")] = REPS
    for op in ("write", "read"):
        expect[("baseline", "tcp", "loopback", "stream", "", "")] = REPS
        for kind in ("tmpfs", "disk"):
            expect[("baseline", "storage", kind, op, "", "")] = REPS
        for c in CLIENTS:
            for s in STRIPES:
                expect[("pvfs-bench", "pvfs", "tmpfs", op, str(c), str(s))] = REPS
    for c in MD_CLIENTS:
        for layout in ("shared", "separate"):
            for target in ("pvfs", "local"):
                for op in ("create", "stat", "remove"):
                    expect[("pvfs-mdtest", layout, target, op, str(c), "")] = REPS
        for feature in COMPARE_FEATURES:
            for op in ("create",) if feature == "hold" else ("create", "remove"):
                for side in ("on", "off"):
                    expect[("pvfs-mdtest-compare", feature, side, op, str(c), "")] = REPS
    for side in ("on", "off"):
        expect[("meta-writes", "reply-cache", side, "create+stat+remove", "1", "")] = 2
    for what in ("pvfs", "dd"):
        for op in ("in", "out"):
            expect[("pvfs-cp", what, "disk", op, "", "")] = REPS
    for c in HOLD_CLIENTS:
        for kind in ("hold", "plain"):
            expect[("pvfs-bench-hold", "pvfs", kind, "write", str(c), str(DATA_SERVERS))] = REPS
    for c in MAC_CLIENTS:
        for kind in ("macs", "none"):
            for op in ("write", "read"):
                expect[("pvfs-bench-macs", "pvfs", kind, op, str(c), str(DATA_SERVERS))] = REPS
    got = {}
    for r in rows:
        key = (r.get("phase"), r.get("what"), r.get("target"), r.get("op"), r.get("clients"),
               r.get("stripes"))
        got.setdefault(key, []).append(r.get("rep"))
        for field in ("seconds", "value"):
            try:
                ok = positive(float(r.get(field) or "nan"))
            except ValueError:
                ok = False
            if not ok:
                problem(f"data.csv: {key} rep {r.get('rep')}: {field} = {r.get(field)!r}")
    for key, reps in expect.items():
        have = sorted(got.get(key, []))
        if have != [str(i) for i in range(reps)]:
            problem(f"data.csv: {key}: repetitions {have}, expected 0..{reps - 1}")
    extra = set(got) - set(expect)
    if extra:
        problem(f"data.csv: unexpected rows {sorted(extra)[:3]}")


def check_stages(out):
    """summary.json's bulk_stages: every sweep point, both directions, from
    the data servers' own counters; a point whose servers moved no chunk
    (counters missing or never counted) is a failure."""
    try:
        stages = json.loads((out / "summary.json").read_text()).get("bulk_stages")
    except (OSError, ValueError):
        return  # check_summary reported it
    if not isinstance(stages, list):
        problem("summary.json: no bulk_stages list")
        return
    seen = set()
    for r in stages:
        key = (r.get("op"), r.get("clients"), r.get("stripes"))
        seen.add(key)
        if r.get("reps") != REPS:
            problem(f"bulk_stages {key}: {r.get('reps')!r} repetitions, expected {REPS}")
        for k in ("requests_depth", "network_depth", "storage_depth", "network_ms",
                  "storage_ms", "chunks"):
            if not positive(r.get(k)):
                problem(f"bulk_stages {key}: {k} {r.get(k)!r} is not a positive number")
    for op in ("write", "read"):
        for c in CLIENTS:
            for s in STRIPES:
                if (op, c, s) not in seen:
                    problem(f"bulk_stages: nothing for {op} C={c} S={s}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--profiles", action="store_true", help="the perf profiles must be there")
    args = ap.parse_args()
    check_files(args.out, FILES + tuple(f"profiles/{p}" for p in PROFILES if args.profiles))
    check_summary(args.out)
    check_data(args.out)
    check_stages(args.out)
    try:
        md = (args.out / "summary.md").read_text()
        for section in ("## Targets", "## Baselines", "## What limits each figure",
                        "## What limits each figure: where the chunks go"):
            if section not in md:
                problem(f"summary.md has no {section!r} section")
        skipped = fuse_state(args.out)[0]
        if skipped is None and "## FUSE vs the library" not in md:
            problem("summary.md has no FUSE section")
        if skipped is not None and f"FUSE phase skipped: {skipped}" not in md:
            problem("summary.md does not say why the FUSE phase was skipped")
        if "FAILED" in md:
            problem("summary.md reports a failure")
        for p in PROFILES if args.profiles else ():
            if f"(profiles/{p})" not in md:
                problem(f"summary.md does not link profiles/{p}")
    except OSError:
        pass
    return report("check_fs_results")


if __name__ == "__main__":
    sys.exit(main())
