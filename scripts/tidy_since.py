#!/usr/bin/python3
"""Which C++ sources clang-tidy must look at again since a clean revision.

    scripts/tidy_since.py SRC BUILD REV < candidate-sources

REV is a commit whose whole tree clang-tidy found clean.  A candidate
(a path relative to SRC, one per line on stdin) is printed when its
translation unit can see something REV's did not:

- it read a file changed since REV: the source itself or any header it
  includes, from ninja's dependency log of BUILD (`ninja -t deps`);
- its compile command differs from REV's: when a CMakeLists.txt or a
  .cmake file changed, REV's tree is configured in a scratch directory
  with BUILD's PVFS_* cache options and the two compilation databases
  are compared file by file (new sources count as changed).

Every candidate is printed, with the reason on stderr, when REV is not an
ancestor of HEAD, when .clang-tidy changed (other checks), or when BUILD
has no dependency log.  Standard library only: it runs on a fresh machine.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile


def git(src, *args):
    return subprocess.run(["git", "-C", src, *args], check=True, capture_output=True,
                          text=True).stdout


def ninja_deps(build):
    """{source: set of files it read} from ninja's dependency log."""
    out = subprocess.run(["ninja", "-C", build, "-t", "deps"], check=True,
                         capture_output=True, text=True).stdout
    deps, first = {}, None
    for line in out.splitlines():
        if not line.startswith("    "):
            first = None
            continue
        path = line[4:]
        if first is None:
            first = path
            deps.setdefault(first, set())
        deps[first].add(path)
    return deps


def cache_options(build):
    """BUILD's own PVFS_* options (not the INTERNAL ones of pkg-config)."""
    opts = []
    with open(os.path.join(build, "CMakeCache.txt"), encoding="utf-8") as cache:
        for line in cache:
            name, sep, value = line.rstrip("\n").partition("=")
            if sep and name.startswith("PVFS_") and not name.endswith(":INTERNAL"):
                opts.append(f"-D{name}={value}")
    return opts


def commands(db_path, tree, build):
    """{source relative to the tree: its command with the tree's paths taken out}."""
    with open(db_path, encoding="utf-8") as db:
        entries = json.load(db)
    result = {}
    for entry in entries:
        command = entry.get("command") or " ".join(entry.get("arguments", []))
        command = command.replace(build, "@BUILD@").replace(tree, "@SRC@")
        result[os.path.relpath(entry["file"], tree)] = command
    return result


def changed_commands(src, build, rev):
    """Sources whose compile command differs between REV and BUILD."""
    scratch = tempfile.mkdtemp(prefix="pvfs-tidy-since.")
    tree = os.path.join(scratch, "tree")
    rev_build = os.path.join(scratch, "build")
    try:
        git(src, "worktree", "add", "--quiet", "--detach", tree, rev)
        # Paths into BUILD or SRC point into the scratch copies instead.
        opts = [o.replace(build, rev_build).replace(src, tree) for o in cache_options(build)]
        subprocess.run(["cmake", "-S", tree, "-B", rev_build, "-G", "Ninja", *opts],
                       check=True, capture_output=True)
        old = commands(os.path.join(rev_build, "compile_commands.json"), tree, rev_build)
        new = commands(os.path.join(build, "compile_commands.json"), src, build)
        return {f for f, cmd in new.items() if old.get(f) != cmd}
    finally:
        subprocess.run(["git", "-C", src, "worktree", "remove", "--force", tree],
                       capture_output=True, check=False)
        shutil.rmtree(scratch, ignore_errors=True)


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__.split("\n\n")[1])
    src, build, rev = (os.path.realpath(sys.argv[1]), os.path.realpath(sys.argv[2]),
                       sys.argv[3])
    candidates = [line.strip() for line in sys.stdin if line.strip()]

    def everything(why):
        print(f"lint: clang-tidy on every source: {why}", file=sys.stderr)
        for line in candidates:
            print(line)

    if subprocess.run(["git", "-C", src, "merge-base", "--is-ancestor", rev, "HEAD"],
                      capture_output=True, check=False).returncode != 0:
        return everything(f"{rev} is not an ancestor of HEAD")
    changed = set(git(src, "diff", "--name-only", rev, "--").split())
    if any(os.path.basename(f) == ".clang-tidy" for f in changed):
        return everything(f".clang-tidy changed since {rev}")
    if not os.path.exists(os.path.join(build, ".ninja_deps")):
        return everything(f"{build} has no ninja dependency log")

    wanted = set()
    changed_abs = {os.path.join(src, f) for f in changed}
    for source, read in ninja_deps(build).items():
        if read & changed_abs and source.startswith(src + "/"):
            wanted.add(os.path.relpath(source, src))
    build_changed = [f for f in changed
                     if os.path.basename(f) == "CMakeLists.txt" or f.endswith(".cmake")]
    if build_changed:
        try:
            flagged = changed_commands(src, build, rev)
        except (subprocess.CalledProcessError, OSError, ValueError) as err:
            return everything(f"the build changed since {rev} and its commands "
                              f"could not be compared ({err})")
        print(f"lint: clang-tidy: {len(flagged)} sources compile differently since {rev}",
              file=sys.stderr)
        wanted |= flagged
    print(f"lint: clang-tidy since {rev}: {len(changed)} files changed, "
          f"{len(wanted & set(candidates))} sources to check", file=sys.stderr)
    for line in sorted(wanted & set(candidates)):
        print(line)
    return None


if __name__ == "__main__":
    main()
