"""bench/fs/run's FUSE phase: pvfs-fuse on the tmpfs cluster against the
library (pvfs-cp, pvfs-ls) on the same cluster, in the same run.

  - sequential write of one file: dd (bs = the runner's BLOCK, fsync'd)
    into the mount vs pvfs-cp -t from the same tmpfs source;
  - sequential read of it: dd out of the mount into tmpfs (fsync'd) vs
    pvfs-cp -t out, each copy compared with the source (cmp);
  - the same dd write through a second mount with -o nowrite_behind (what
    write-behind gives: every WRITE waited for);
  - `ls -l` of a directory of N files (each repetition a directory the
    mount's kernel caches have not seen) vs pvfs-ls -l of it, and the same
    through a second mount with -o nordirplus (what READDIRPLUS gives).

Each repetition runs both sides, the order flipping every repetition; the
ratios are FUSE / library of the rates (above 1: FUSE is faster), the
median of the per-repetition ratios.  pvfs-fuse's status line (SIGUSR1)
gives the largest READ and WRITE the kernel sent, and how many READs the
read phase caused (so that a read from the page cache is not taken for
one from the servers).

Skipped (a note in summary.md and summary.json's fuse_skipped, no rows)
where FUSE cannot mount here: not root, no working /dev/fuse, no
pvfs-fuse in the build.  The runner's helpers come in as `R` (the run
module), so that this file needs none of its own.
"""

import os
import re
import signal
import subprocess
import time
from pathlib import Path

CLUSTER = "tmpfs"
SIDES_DATA = ("fuse", "library", "fuse-nowrite_behind")
NO_BEHIND = "fuse-nowrite_behind"  # a write-only side
SIDES_LIST = ("fuse", "library", "fuse-nordirplus")
FILE_BYTES = 100  # each listed file's size: sizes come from the data servers
STATUS = re.compile(
    r"FUSE requests: (\d+) LOOKUP, (\d+) READDIR, (\d+) READDIRPLUS \((\d+) entries with "
    r"attributes\), (\d+) READ \(largest (\d+) bytes\), (\d+) WRITE \(largest (\d+) bytes\); "
    r"(\d+) inodes looked up; (\d+) WRITE behind")
STATUS_KEYS = ("lookups", "readdirs", "readdirplus", "plus_entries", "reads", "read_max",
               "writes", "write_max", "looked_up", "behind")


def unusable(build):
    """Why FUSE cannot mount here, or None."""
    if not os.access(build / "fuse" / "pvfs-fuse", os.X_OK):
        return "pvfs-fuse was not built (libfuse3-dev missing)"
    if os.geteuid() != 0:
        return "not root (the FUSE mounts need root)"
    try:
        fd = os.open("/dev/fuse", os.O_RDWR | os.O_CLOEXEC)
        os.close(fd)
    except OSError as e:
        return f"/dev/fuse does not open: {e.strerror}"
    return None


def mounted(path):
    try:
        with open("/proc/mounts") as f:
            return any(line.split()[1] == str(path) for line in f if len(line.split()) > 1)
    except OSError:
        return False


class Mount:
    """A pvfs-fuse in the foreground on `mnt` (its pid among the runner's
    kept processes, so that the tools' leftover check spares it)."""

    def __init__(self, R, build, runner, config, mnt, log_path, options=()):
        self.R, self.build, self.runner = R, build, runner
        self.config, self.mnt, self.log_path = config, mnt, log_path
        self.options = options
        self.proc = None

    def start(self):
        self.mnt.mkdir(parents=True, exist_ok=True)
        argv = [str(self.build / "fuse" / "pvfs-fuse"), "-c", str(self.config), str(self.mnt),
                "-f", "--log", str(self.log_path)]
        for o in self.options:
            argv += ["-o", o]
        err = open(self.log_path.with_suffix(".stderr"), "w")
        with err:
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=err, stderr=err,
                                         start_new_session=True, preexec_fn=self.R.child_setup)
        self.runner.keep.add(self.proc.pid)
        deadline = time.monotonic() + 20
        while not mounted(self.mnt):
            if self.proc.poll() is not None:
                raise self.R.Failure(f"pvfs-fuse on {self.mnt} exited ({self.proc.returncode}): "
                                     f"{self.R.tail(self.log_path.with_suffix('.stderr'))}")
            if time.monotonic() > deadline:
                raise self.R.Failure(f"pvfs-fuse did not mount {self.mnt} within 20 s")
            time.sleep(0.05)

    def status(self):
        """pvfs-fuse's counters now (a status line asked for with SIGUSR1)."""
        before = self.log_path.read_text(errors="replace").count("FUSE requests:")
        self.proc.send_signal(signal.SIGUSR1)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            text = self.log_path.read_text(errors="replace")
            found = STATUS.findall(text)
            if len(found) > before:
                return dict(zip(STATUS_KEYS, (int(x) for x in found[-1])))
            time.sleep(0.05)
        raise self.R.Failure(f"pvfs-fuse on {self.mnt} wrote no status line within 10 s")

    def stop(self):
        if self.proc is None:
            return
        if mounted(self.mnt):
            r = subprocess.run(["umount", str(self.mnt)], capture_output=True, timeout=30)
            if r.returncode != 0:
                subprocess.run(["umount", "-l", str(self.mnt)], capture_output=True, timeout=30)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.runner.keep.discard(self.proc.pid)
        self.proc = None


def delta(after, before, key):
    return after[key] - before[key]


def data_phase(R, b, cluster, mounts, work):
    """Sequential write and read: dd through the mount vs pvfs-cp, and the
    write through the -o nowrite_behind mount."""
    size, block = b.p.fuse_bytes, R.BLOCK
    src, back = work / "src.dat", work / "back.dat"
    b.make_file(src, size)
    cp = [b.tool("pvfs-cp"), "-c", cluster.config, "-t", "-q", "-b", R.size_arg(block)]
    for rep in range(b.p.reps):
        order = SIDES_DATA if rep % 2 == 0 else SIDES_DATA[::-1]
        for op in ("write", "read"):
            for side in order:
                if side == NO_BEHIND and op != "write":
                    continue
                what = f"FUSE phase {side} {op} rep {rep}"
                name = {"fuse": f"fuse-{rep}.dat", NO_BEHIND: f"fuse-wt-{rep}.dat"}.get(
                    side, f"lib-{rep}.dat")
                mount = mounts.get(side)
                before = mount.status() if mount else None
                if mount and op == "write":
                    argv = ["dd", f"if={src}", f"of={mount.mnt / name}", f"bs={block}",
                            "conv=fsync"]
                elif mount:
                    back.unlink(missing_ok=True)
                    argv = ["dd", f"if={mount.mnt / name}", f"of={back}", f"bs={block}",
                            "conv=fsync"]
                elif op == "write":
                    argv = cp + [src, f"pvfs:/{name}"]
                else:
                    back.unlink(missing_ok=True)
                    argv = cp + [f"pvfs:/{name}", back]
                r = b.runner.run(f"fuse {side} {op}", f"fuse.{side}.{op}.r{rep}", argv, rep,
                                 env=b.env)
                cluster.check_alive(what)
                b.runner.check(r, what)
                nbytes, secs = (R.parse_dd if mount else R.parse_cp)(r, size, what)
                if mount:
                    after = mount.status()
                    b.fuse_seen[op] = max(b.fuse_seen.get(op, 0),
                                          after["write_max" if op == "write" else "read_max"])
                    # The bytes came from the servers, not the page cache.
                    key = "writes" if op == "write" else "reads"
                    if delta(after, before, key) == 0:
                        raise R.Failure(f"{what}: pvfs-fuse saw no {key.upper()} (cached?)")
                    if op == "write":
                        b.fuse_behind[side] = (b.fuse_behind.get(side, 0) +
                                               delta(after, before, "behind"))
                if op == "read":
                    c = b.runner.run("cmp", f"fuse.cmp.{side}.r{rep}", ["cmp", src, back], rep,
                                     env=b.env, record=False)
                    if c.rc != 0:
                        raise R.Failure(f"{what}: the copy differs from the original: "
                                        f"{c.stdout.strip() or c.outcome}")
                b.add(phase="fuse", what=CLUSTER, target=side, op=op, rep=rep, bytes=nbytes,
                      seconds=secs, value=nbytes / secs / R.MiB, unit="MiB/s")
    back.unlink(missing_ok=True)
    src.unlink(missing_ok=True)


def list_phase(R, b, cluster, work):
    """`ls -l` of N files: a fresh mount with READDIRPLUS, one without, and
    pvfs-ls -l; each repetition a directory none of the mounts listed."""
    n = b.p.fuse_files
    logs = b.runner.logdir
    maker = Mount(R, b.build, b.runner, cluster.config, work / "mnt-make", logs / "fuse-make.log")
    maker.start()
    try:
        for rep in range(b.p.reps):
            d = maker.mnt / f"list-{rep}"
            d.mkdir()
            for i in range(n):
                with open(d / f"file-{i:06d}", "wb") as f:
                    f.write(b"x" * FILE_BYTES)
    finally:
        maker.stop()
    mounts = {"fuse": Mount(R, b.build, b.runner, cluster.config, work / "mnt-plus",
                            logs / "fuse-plus.log"),
              "fuse-nordirplus": Mount(R, b.build, b.runner, cluster.config,
                                       work / "mnt-noplus", logs / "fuse-noplus.log",
                                       ("nordirplus",))}
    try:
        for m in mounts.values():
            m.start()
        pvfs_ls = [b.tool("pvfs-ls"), "-c", cluster.config, "-l"]
        # The servers' caches warm for every side alike: not measured.
        for rep in range(b.p.reps):
            r = b.runner.run("fuse warm-up", f"fuse.warm.r{rep}", pvfs_ls + [f"/list-{rep}"],
                             rep, env=b.env, record=False)
            b.runner.check(r, f"pvfs-ls -l /list-{rep}")
        for rep in range(b.p.reps):
            order = SIDES_LIST if rep % 2 == 0 else SIDES_LIST[::-1]
            for side in order:
                what = f"FUSE phase {side} ls -l rep {rep}"
                if side == "library":
                    argv, lines = pvfs_ls + [f"/list-{rep}"], n
                else:
                    argv, lines = ["ls", "-l", "--", mounts[side].mnt / f"list-{rep}"], n + 1
                    before = mounts[side].status()
                r = b.runner.run(f"fuse {side} ls -l", f"fuse.{side}.ls.r{rep}", argv, rep,
                                 env=b.env)
                cluster.check_alive(what)
                b.runner.check(r, what)
                got = r.stdout.splitlines()
                sized = [x for x in got if f" {FILE_BYTES} " in x]
                if len(got) != lines or len(sized) != n:
                    raise R.Failure(f"{what}: {len(got)} lines, {len(sized)} of {FILE_BYTES} "
                                    f"bytes; expected {lines} and {n} (logs/{r.label}.out)")
                if side != "library":
                    after = mounts[side].status()
                    b.fuse_lookups[side] = b.fuse_lookups.get(side, 0) + delta(
                        after, before, "lookups")
                    b.fuse_plus[side] = b.fuse_plus.get(side, 0) + delta(
                        after, before, "plus_entries")
                b.add(phase="fuse", what=CLUSTER, target=side, op="ls -l", rep=rep, count=n,
                      seconds=r.wall, value=n / r.wall, unit="entries/s")
    finally:
        for m in mounts.values():
            m.stop()


def run(R, b, cluster, work):
    """The phase on a running cluster; raises R.Failure."""
    why = unusable(b.build)
    if why is not None:
        b.fuse_skipped = why
        b.notes.append(f"FUSE phase skipped: {why}")
        R.log(f"FUSE phase skipped: {why}")
        return
    work.mkdir(parents=True, exist_ok=True)
    mounts = {"fuse": Mount(R, b.build, b.runner, cluster.config, work / "mnt",
                            b.runner.logdir / "fuse-data.log"),
              NO_BEHIND: Mount(R, b.build, b.runner, cluster.config, work / "mnt-wt",
                               b.runner.logdir / "fuse-data-nowrite_behind.log",
                               ("nowrite_behind",))}
    b.runner.watched = cluster.pids()
    try:
        for side, mount in mounts.items():
            mount.start()
            b.runner.watched[f"pvfs-fuse {side}"] = mount.proc.pid
        data_phase(R, b, cluster, mounts, work)
    finally:
        for mount in mounts.values():
            mount.stop()
        b.runner.watched = {}
    list_phase(R, b, cluster, work)


def targets(R, b):
    """summary.json's FUSE targets (none when the phase was skipped)."""
    if b.fuse_skipped:
        return []
    out = []
    size = f"{b.p.fuse_bytes // R.MiB} MiB"
    for op in ("write", "read"):
        match = dict(phase="fuse", what=CLUSTER, op=op)
        out.append(R.entry(
            f"FUSE/library sequential {op}", R.median(b.values(target="fuse", **match)),
            R.median(b.values(target="library", **match)), "MiB/s", "ratio", ">=",
            R.FUSE_GOAL, f">= {R.FUSE_GOAL:.2f}",
            f"a {size} file, dd bs={R.BLOCK // R.MiB}M vs pvfs-cp -t; largest {op.upper()} "
            f"pvfs-fuse got: {b.fuse_seen.get(op, 0)} bytes",
            ratios=b.paired_ratios("fuse", "library", **match)))
    match = dict(phase="fuse", what=CLUSTER, op="write")
    out.append(R.entry(
        "FUSE sequential write, write-behind on/off", R.median(b.values(target="fuse", **match)),
        R.median(b.values(target=NO_BEHIND, **match)), "MiB/s", "ratio", ">=", 1.0, ">= 1.00",
        f"two mounts of the same cluster, -o nowrite_behind on the second; WRITEs answered "
        f"behind: {b.fuse_behind.get('fuse', 0)} and {b.fuse_behind.get(NO_BEHIND, 0)}",
        ratios=b.paired_ratios("fuse", NO_BEHIND, **match)))
    match = dict(phase="fuse", what=CLUSTER, op="ls -l")
    n = b.p.fuse_files
    out.append(R.entry(
        f"FUSE/library ls -l of {n} files", R.median(b.values(target="fuse", **match)),
        R.median(b.values(target="library", **match)), "entries/s", "ratio", ">=",
        R.FUSE_GOAL, f">= {R.FUSE_GOAL:.2f}",
        f"ls -l vs pvfs-ls -l (its start and connections included); LOOKUPs "
        f"{b.fuse_lookups.get('fuse', 0)} with READDIRPLUS ({b.fuse_plus.get('fuse', 0)} "
        f"entries with attributes), {b.fuse_lookups.get('fuse-nordirplus', 0)} without",
        ratios=b.paired_ratios("fuse", "library", **match)))
    out.append(R.entry(
        f"FUSE ls -l of {n} files, readdirplus on/off",
        R.median(b.values(target="fuse", **match)),
        R.median(b.values(target="fuse-nordirplus", **match)), "entries/s", "ratio", ">=",
        1.0, ">= 1.00", "two mounts of the same cluster, -o nordirplus on the second",
        ratios=b.paired_ratios("fuse", "fuse-nordirplus", **match)))
    return out


def summary(R, b):
    """summary.md's FUSE section (lines)."""
    L = ["## FUSE vs the library (tmpfs cluster)\n"]
    if b.fuse_skipped:
        L.append(f"Skipped: {b.fuse_skipped}.\n")
        return L
    L.append(f"pvfs-fuse mounted on the cluster the library uses, in the same run: a "
             f"{b.p.fuse_bytes // R.MiB} MiB file written and read with dd through the mount "
             f"(bs={R.BLOCK // R.MiB}M, fsync'd, into tmpfs for the read) and with pvfs-cp -t; "
             f"`ls -l` of {b.p.fuse_files} files of {FILE_BYTES} bytes through a fresh mount "
             "(each repetition a directory it never saw) with and without READDIRPLUS, and "
             "pvfs-ls -l.  Cells: median (min–max) over the repetitions; ratio: FUSE / "
             "library of the rates, median (min–max) of the per-repetition ratios.\n")
    L.append("| what | FUSE | library | ratio |")
    L.append("|---|---|---|---|")
    for op, unit, base in (("write", "MiB/s", "library"), ("write", "MiB/s", NO_BEHIND),
                           ("read", "MiB/s", "library"),
                           ("ls -l", "entries/s", "library"),
                           ("ls -l", "entries/s", "fuse-nordirplus")):
        match = dict(phase="fuse", what=CLUSTER, op=op)
        ratios = b.paired_ratios("fuse", base, **match)
        spread = (f"{R.statistics.median(ratios):.3f} ({min(ratios):.3f}–{max(ratios):.3f})"
                  if ratios else "—")
        label = f"{op} ({unit})" + {"library": "", NO_BEHIND: " vs -o nowrite_behind"}.get(
            base, " vs -o nordirplus")
        L.append(f"| {label} | {R.cell(b.values(target='fuse', **match))} | "
                 f"{R.cell(b.values(target=base, **match))} | {spread} |")
    L.append("")
    L.append(f"Largest WRITE pvfs-fuse got: {b.fuse_seen.get('write', 0)} bytes; largest READ: "
             f"{b.fuse_seen.get('read', 0)} bytes.  LOOKUPs during the listings: "
             f"{b.fuse_lookups.get('fuse', 0)} with READDIRPLUS, "
             f"{b.fuse_lookups.get('fuse-nordirplus', 0)} without.\n")
    return L
