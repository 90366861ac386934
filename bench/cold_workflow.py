"""The cold default workflow on this machine, the Rust builds included, broken down per
rule from the `benchmark:` files: a fresh working folder and a fresh cargo target folder.

Also printed: the CPU time of the whole run (Snakemake, its jobs and their children, from
``getrusage``; on N cores the wall time cannot be below CPU ÷ N), when the first useful
result, the A3 headline table (``results/tables/a3_adamw/split-cpu.md``), appeared, in
seconds from the start, and each build's wall time and start and end offsets (from its
benchmark file), so
the figures show whether the builds ran one at a time and what ran beside them.

    .venv/bin/python bench/cold_workflow.py [--cores N] [--keep DIR]

``--keep DIR`` runs in DIR (made afresh, it must not exist) and leaves it, with its
results, for a later benchmark (``noop_rerun.py --workdir DIR``) or a comparison of the
outputs with another run's; the cargo target folder is DIR/target.

``--from-nothing`` times the README's first command as a new machine runs it: a fresh clone
of this repository's committed HEAD (in DIR/clone), an empty pip cache and an empty cargo
home (crate registry), so every package and crate is downloaded; ``scripts/dev/bootstrap``
(the virtual environment, torch included) is timed apart from the workflow, and the
workflow's figures (headline, builds, jobs) count from its own start. The Rust toolchain
is the machine's (``RUSTUP_HOME`` is kept).
"""

import argparse
import csv
import os
import resource
import shutil
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path

from common import REPO, SNAKEMAKE, machine, table, wall


def job_group(path: Path) -> str:
    """The row a benchmark file counts in: its folder (``compare``, ``localise``, …), split by
    framework for builds, training runs and probes (``train candle``)."""
    top = path.parts[0].removesuffix(".tsv")
    if top in ("build", "train", "probes"):
        return f"{top} {path.stem.split('-')[0].split('_')[0]}"
    return top


#: The first useful result of the default run (rules/common.smk FIRST_COMPARISON).
HEADLINE = Path("results/tables/a3_adamw/split-cpu.md")


def watch(path: Path, start: float, stop: threading.Event, found: list) -> None:
    """Poll every 0.5 s for ``path``; append the seconds since ``start`` when it appears."""
    while not stop.is_set():
        if path.exists():
            found.append(time.perf_counter() - start)
            return
        stop.wait(0.5)


def build_rows(workdir: Path, t0: float) -> list[dict]:
    """One row per build job: its wall time (benchmark file) and its start and end as
    offsets in seconds from the workflow's start ``t0`` (epoch seconds): Snakemake writes
    the benchmark file when the job ends."""
    rows = []
    folder = Path(workdir, "results/benchmarks/build")
    for tsv in sorted(folder.rglob("*.tsv"), key=lambda p: p.stat().st_mtime):
        with open(tsv, encoding="utf-8") as f:
            seconds = float(next(csv.DictReader(f, delimiter="\t"))["s"])
        ended = tsv.stat().st_mtime - t0
        rows.append(
            {
                "build": str(tsv.relative_to(folder).with_suffix("")),
                "wall (s)": f"{seconds:.0f}",
                "started at (s)": f"{ended - seconds:.0f}",
                "ended at (s)": f"{ended:.0f}",
            }
        )
    return rows


def from_nothing_env(tmp: Path) -> dict:
    """The environment of a new machine's first run: nothing cached, the venv in the clone."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PARITY_", "CARGO_"))}
    env.update(
        PIP_CACHE_DIR=str(tmp / "pip-cache"),
        CARGO_HOME=str(tmp / "cargo-home"),
        RUSTUP_HOME=os.environ.get("RUSTUP_HOME", str(Path.home() / ".rustup")),
    )
    env["PATH"] = os.pathsep.join([str(Path.home() / ".cargo" / "bin"), env.get("PATH", "")])
    return env


def cpu_of_children() -> float:
    """User + system CPU seconds of this process's finished children so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cores", type=int, default=os.cpu_count())
    parser.add_argument("--keep", type=Path, help="run in this new folder and leave it")
    parser.add_argument(
        "--from-nothing",
        action="store_true",
        help="a fresh clone, empty pip and cargo caches, bootstrap timed apart",
    )
    args = parser.parse_args()
    if args.keep is not None and args.keep.exists():
        raise SystemExit(f"--keep {args.keep}: already exists; give a new folder")
    tmp = str(args.keep.resolve()) if args.keep else tempfile.mkdtemp(prefix="parity-cold-")
    os.makedirs(tmp, exist_ok=True)
    setup = None
    try:
        if args.from_nothing:
            workdir = Path(tmp, "clone")
            env = from_nothing_env(Path(tmp))
            wall(["git", "clone", "-q", str(REPO), str(workdir)], cwd=tmp)
            cpu0 = cpu_of_children()
            seconds, _ = wall([str(workdir / "scripts/dev/bootstrap")], cwd=workdir, env=env)
            setup = (seconds, cpu_of_children() - cpu0)
            command = [str(workdir / ".venv/bin/snakemake"), "--cores", str(args.cores)]
        else:
            workdir = Path(tmp)
            env = dict(os.environ, CARGO_TARGET_DIR=str(workdir / "target"))
            command = [
                SNAKEMAKE,
                "--snakefile",
                str(REPO / "Snakefile"),
                "--directory",
                tmp,
                "--cores",
                str(args.cores),
            ]
        found: list[float] = []
        stop = threading.Event()
        cpu0 = cpu_of_children()
        t0 = time.time()
        start = time.perf_counter()
        watcher = threading.Thread(target=watch, args=(workdir / HEADLINE, start, stop, found))
        watcher.start()
        try:
            wall(command, cwd=workdir, env=env)
        finally:
            stop.set()
            watcher.join()
        total = time.perf_counter() - start
        cpu = cpu_of_children() - cpu0
        per_rule = defaultdict(list)
        for tsv in Path(workdir, "results/benchmarks").rglob("*.tsv"):
            rule = job_group(tsv.relative_to(Path(workdir, "results/benchmarks")))
            with open(tsv, encoding="utf-8") as f:
                per_rule[rule] += [float(r["s"]) for r in csv.DictReader(f, delimiter="\t")]
        builds = build_rows(workdir, t0)
    finally:
        if args.keep is None:
            shutil.rmtree(tmp, ignore_errors=True)
    rows = [
        {
            "jobs (benchmark folder)": rule,
            "jobs": len(s),
            "total (s)": f"{sum(s):.1f}",
            "longest (s)": f"{max(s):.1f}",
        }
        for rule, s in sorted(per_rule.items(), key=lambda kv: -sum(kv[1]))
    ]
    print(machine())
    if setup is not None:
        print(
            f"from nothing: scripts/dev/bootstrap {setup[0]:.0f} s wall, {setup[1]:.0f} s CPU; "
            f"with the workflow {setup[0] + total:.0f} s"
        )
    print(f"cold default workflow, {args.cores} cores: {total:.0f} s wall, {cpu:.0f} s CPU")
    headline = f"{found[0]:.0f} s" if found else "never"
    print(f"{HEADLINE} appeared after {headline}")
    if builds:
        print(table(builds, list(builds[0])))
    print(table(rows, list(rows[0])))


if __name__ == "__main__":
    main()
