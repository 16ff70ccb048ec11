"""What capabilities cost (issue 25): bench/fs/run's cap_pairs phase.

On a tmpfs cluster whose config sets insecure_benchmark_only (so that the
library heeds --insecure-no-capabilities) and require_capabilities = false
(so that its data servers serve requests without one), the same tools run
with capabilities and without, in pairs whose order alternates:

- pvfs-bench write and read at C clients (Params.mac_clients), S =
  DATA_SERVERS: with capabilities each client asks the metadata server for
  one per file and sends it, checked by the data server, on every request;
- pvfs-mdtest (shared directory, Params.md_clients): with capabilities
  each create's answer carries a signed one, and each remove asks for a
  destroy capability first.

Each ratio is on / off of the same pair; the report gives the median, min
and max over the pairs (docs/security.md "Capabilities").  The cluster's
storage is tmpfs, for both: a disk's fsync latency would hide what is, for
creates, the cost of signing and checking a MAC.

R is bench/fs/run's module, b its Bench; kept apart from run so that it
stays readable.
"""

CLUSTER = "caps"
# What this cluster's [defaults] add to pvfs-genconfig's.
DEFAULTS = "require_capabilities = false\n"
GOAL = 0.95  # issue 25: at most 5% off streaming bandwidth and creates/s
MD_OPS = ("create", "remove")


def stream_pairs(R, b, cluster):
    s = R.DATA_SERVERS
    for c in b.p.mac_clients:
        region = 2 * b.p.bench_total // c
        for rep in range(b.p.rc_reps):
            kinds = ["caps", "none"] if rep % 2 == 0 else ["none", "caps"]
            for kind in kinds:
                what = f"pvfs-bench capabilities {kind} C={c} S={s} rep {rep}"
                argv = b.bench_argv(cluster, c, s, region)
                if kind == "none":
                    argv.append("--insecure-no-capabilities")
                r = b.runner.run(f"pvfs-bench caps-{kind} C={c} S={s}",
                                 f"bench-caps-{kind}.C{c}.S{s}.r{rep}", argv, rep, env=b.env,
                                 clients=c)
                cluster.check_alive(what)
                b.runner.check(r, what)
                j = R.parse_json(r, what)
                try:
                    ok = j["clients"] == c and j["capabilities"] == (kind == "caps")
                    phases = {op: (j[op]["mb_per_s"], j[op]["seconds"])
                              for op in ("write", "read")}
                except (KeyError, TypeError):
                    raise R.Failure(f"{what}: JSON lacks clients/capabilities/write/read "
                                    f"(logs/{r.label}.out)")
                if not ok:
                    raise R.Failure(f"{what}: clients={j.get('clients')} "
                                    f"capabilities={j.get('capabilities')}")
                for op, (mb, secs) in phases.items():
                    if not R.positive(mb) or not R.positive(secs):
                        raise R.Failure(f"{what}: {op} {mb} MB/s in {secs} s")
                    b.add(phase="pvfs-bench-caps", what="pvfs", target=kind, op=op, clients=c,
                          stripes=s, rep=rep, bytes=c * region, seconds=secs, value=mb,
                          unit="MB/s")


def md_pairs(R, b, cluster):
    for c in b.p.md_clients:
        ops = c * b.p.md_files
        for rep in range(b.p.rc_reps):
            kinds = ["caps", "none"] if rep % 2 == 0 else ["none", "caps"]
            for kind in kinds:
                what = f"pvfs-mdtest capabilities {kind} C={c} rep {rep}"
                argv = b.md_argv(cluster, None, c, "shared", "pvfs")
                if kind == "none":
                    argv.append("--insecure-no-capabilities")
                r = b.runner.run(f"pvfs-mdtest caps-{kind} C={c}",
                                 f"mdtest-caps-{kind}.C{c}.r{rep}", argv, rep, env=b.env,
                                 clients=c)
                cluster.check_alive(what)
                b.runner.check(r, what)
                j = R.parse_json(r, what)
                if j.get("capabilities") != (kind == "caps"):
                    raise R.Failure(f"{what}: capabilities={j.get('capabilities')}")
                for op in MD_OPS:
                    try:
                        rate, n, secs = j[op]["ops_per_s"], j[op]["ops"], j[op]["seconds"]
                    except (KeyError, TypeError):
                        raise R.Failure(f"{what}: JSON lacks {op} (logs/{r.label}.out)")
                    if n != ops or not R.positive(rate) or not R.positive(secs):
                        raise R.Failure(f"{what}: {op}: {n} ops at {rate}/s, expected {ops}")
                    b.add(phase="pvfs-mdtest-caps", what="shared", target=kind, op=op,
                          clients=c, rep=rep, count=n, seconds=secs, value=rate,
                          unit="ops/s")


def pairs(R, b, cluster):
    """Both kinds of pair; a failure in one still lets the other run."""
    b.runner.watched = cluster.pids()
    try:
        for what, step in (("pvfs-bench capabilities pairs", stream_pairs),
                           ("pvfs-mdtest capabilities pairs", md_pairs)):
            try:
                step(R, b, cluster)
                R.log(f"{what}: done")
            except R.Failure as e:
                b.failed(what, e)
                cluster.check_alive(f"after {what}")
    finally:
        b.runner.watched = {}


def rows(R, b):
    """(name, unit, match) of every figure the phase measured."""
    out = []
    for c in b.p.mac_clients:
        for op in ("write", "read"):
            out.append((f"{op} MB/s C={c} S={R.DATA_SERVERS}, capabilities on/off", "MB/s",
                        dict(phase="pvfs-bench-caps", op=op, clients=c,
                             stripes=R.DATA_SERVERS)))
    for c in b.p.md_clients:
        for op in MD_OPS:
            out.append((f"{op}s/s C={c}, capabilities on/off", f"{op}s/s",
                        dict(phase="pvfs-mdtest-caps", op=op, clients=c)))
    return out


def targets(R, b):
    """summary.json's capability targets (none when the phase did not run)."""
    out = []
    for name, unit, match in rows(R, b):
        value = R.median(b.values(target="caps", **match))
        base = R.median(b.values(target="none", **match))
        if value is None or base is None:
            continue
        out.append(R.entry(name, value, base, unit, "ratio", ">=", GOAL, f">= {GOAL:.2f}",
                           ratios=b.paired_ratios("caps", "none", **match)))
    return out


def summary(R, b):
    """summary.md's capabilities section (lines; none when it did not run)."""
    if not any(b.values(phase=m["phase"]) for _, _, m in rows(R, b)):
        return []
    L = ["## What capabilities cost (caps cluster: tmpfs, require_capabilities = false)\n",
         f"pvfs-bench (S={R.DATA_SERVERS}) and pvfs-mdtest (shared directory) with "
         "capabilities and with --insecure-no-capabilities (none asked for, none sent), "
         f"{b.p.rc_reps} pairs each, the order alternating.  Cells: median (min–max) over "
         "the runs; ratio: on / off of each pair, median (min–max).\n",
         "| figure | capabilities on | off | pairs | ratio on/off |",
         "|---|---|---|---|---|"]
    for name, unit, match in rows(R, b):
        ratios = b.paired_ratios("caps", "none", **match)
        spread = (f"{R.statistics.median(ratios):.3f} ({min(ratios):.3f}–{max(ratios):.3f})"
                  if ratios else "—")
        L.append(f"| {name} ({unit}) | {R.cell(b.values(target='caps', **match))} | "
                 f"{R.cell(b.values(target='none', **match))} | {len(ratios)} | {spread} |")
    L.append("")
    return L
