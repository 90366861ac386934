"""How the workflow grows with the number of experiments: the default target's wall time
and its no-op rerun against 1, 2, 4 and 8 copies of ``a3_adamw`` under new names (every
other experiment and the probes off), each in a fresh working folder, printed as a table
and drawn as a plot; the no-op rerun of a generated Snakefile with as many no-op rules as
the copies' DAG beside it, so Snakemake's own growth is separated from ours.

Target: the no-op rerun grows by at most 15 ms per added training job (the least-squares
slope of no-op seconds against training jobs). The bare twin beside it has one rule per job
of the copies' DAG with the same files (``common.mirror_workflow``).

``--touch`` makes the outputs without running the jobs, so 10, 50 and 200 copies can be
measured in minutes rather than hours (no wall time is then reported): the bare twin runs
first and makes every file of the DAG, empty, in the DAG's order; they are copied into the
working folder and ``snakemake --touch --forceall`` records Snakemake's metadata for each
job of this workflow (its params, code and input records, as a real run leaves them), so
the no-op rerun does the same checks as after a real run; only the files' contents differ,
which a no-op rerun does not read.

The Rust runners are copied into each working folder from the build this checkout's
default workflow left (``results/bin``: run ``snakemake --cores 8`` first), so no build is
timed.

    .venv/bin/python bench/scaling.py [--copies 1,2,4,8] [--cores 2] [--touch]
"""

import argparse
import copy
import re
import shutil
import tempfile
import time
from pathlib import Path

import yaml
from common import (
    REPO,
    SNAKEMAKE,
    interleaved_medians,
    machine,
    mirror_workflow,
    table,
    wall,
    write_config,
)

from parity.plan import frameworks, versions

BIN = REPO / "results" / "bin"


def copies_config(n: int) -> dict:
    """config.yaml with ``n`` copies of a3_adamw (``a3_adamw_c1`` …) as its only
    experiments, no probes and no framework table."""
    with open(REPO / "config.yaml", encoding="utf-8") as f:
        config = yaml.safe_load(f)
    a3 = config["experiments"]["a3_adamw"]
    copies = {f"a3_adamw_c{i + 1}": copy.deepcopy(a3) for i in range(n)}
    config["experiments"].update(copies)
    config["only"] = list(copies)
    config["probes"]["enabled"] = False
    config["framework_summary"] = []
    return config


def stage_binaries(workdir: Path, config: dict) -> None:
    """The runners every release of the config needs, from this checkout's results/bin."""
    for fw, releases in versions.configured(config).items():
        for v in releases:
            src = REPO / versions.runner_binary(fw, v, "cpu")
            if not src.exists():
                raise SystemExit(f"{src} is missing: run the default workflow first")
            dest = workdir / versions.runner_binary(fw, v, "cpu")
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(src, dest)


def job_counts(workdir: Path, cfg: Path) -> tuple[int, int]:
    """(every job, training jobs) of the config's default target, from a dry run."""
    _, out = wall(snakemake(workdir, cfg, "-n", "--quiet", "rules"), cwd=workdir)
    stats = out.split("Job stats:", 1)[1].split("total", 1)
    total = int(stats[1].split()[0])
    counts = {m[1]: int(m[2]) for m in re.finditer(r"^(\w+)\s+(\d+)$", stats[0], re.MULTILINE)}
    train = sum(v for k, v in counts.items() if k.startswith("train_"))
    return total, train


def snakemake(workdir: Path, cfg: Path, *args: str) -> list[str]:
    return [SNAKEMAKE, "--snakefile", str(REPO / "Snakefile"), "--directory", str(workdir),
            "--configfile", str(cfg), *args]  # fmt: skip


def slope(xs, ys) -> float:
    """Least-squares slope of ys against xs."""
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum(
        (x - mx) ** 2 for x in xs
    )


def plot(rows, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    timed = "wall (s)" in rows[0]  # not with --touch: no job ran
    fig, axes = plt.subplots(1, 2 if timed else 1, figsize=(10 if timed else 5, 4), dpi=120)
    axes = list(axes) if timed else [axes]
    b = axes[-1]
    jobs = [r["training jobs"] for r in rows]
    if timed:
        a = axes[0]
        a.plot(jobs, [r["wall (s)"] for r in rows], marker="o", label="default target, cold")
        a.set_xlabel("training jobs")
        a.set_ylabel("wall time (s)")
        a.legend()
    b.plot(jobs, [r["no-op (s)"] for r in rows], marker="o", label="no-op rerun, this workflow")
    b.plot(jobs, [r["bare no-op (s)"] for r in rows], marker="s", label="bare twin, same DAG")
    b.set_xlabel("training jobs")
    b.set_ylabel("no-op rerun (s)")
    b.legend()
    for ax in axes:
        ax.grid(True, alpha=0.3)
    fig.suptitle("a3_adamw copies: workflow time against its size")
    fig.tight_layout()
    fig.savefig(path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--copies", default="1,2,4,8")
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--plot", default=str(REPO / "results" / "bench" / "scaling.png"))
    ap.add_argument("--touch", action="store_true", help="make the outputs, run no job")
    args = ap.parse_args()
    print(machine())
    rows = []
    for n in [int(c) for c in args.copies.split(",")]:
        with tempfile.TemporaryDirectory(prefix=f"bench-scaling-{n}-") as tmp:
            workdir = Path(tmp)
            config = copies_config(n)
            cfg = write_config(workdir / "bench-config.yaml", config)
            stage_binaries(workdir, config)
            jobs, train = job_counts(workdir, cfg)
            start = time.perf_counter()
            if args.touch:
                bare_cmd = mirror_workflow(workdir, cfg, workdir / "bare")
                shutil.copytree(
                    workdir / "bare" / "results", workdir / "results", dirs_exist_ok=True
                )  # fmt: skip (the runners too: none runs)
                touch = ["--cores", "1", "--touch", "--forceall", "--quiet"]
                wall(snakemake(workdir, cfg, *touch), cwd=workdir)
                seconds = None
            else:
                wall(snakemake(workdir, cfg, "--cores", str(args.cores)), cwd=workdir)
                seconds = time.perf_counter() - start
                bare_cmd = mirror_workflow(workdir, cfg, workdir / "bare")
            medians = interleaved_medians(
                {"ours": (snakemake(workdir, cfg, "--cores", "1"), workdir), "bare": bare_cmd}
            )
            noop, bare = medians["ours"], medians["bare"]
        row = {"copies": n, "jobs": jobs, "training jobs": train}
        if seconds is not None:
            row["wall (s)"] = round(seconds, 1)
        rows.append(row | {"no-op (s)": round(noop, 2), "bare no-op (s)": round(bare, 2)})
        print(rows[-1], flush=True)
    columns = list(rows[0])
    print(table(rows, columns))
    if len(rows) > 1:
        x = [r["training jobs"] for r in rows]
        ours = slope(x, [r["no-op (s)"] for r in rows]) * 1000
        bare = slope(x, [r["bare no-op (s)"] for r in rows]) * 1000
        line = (
            f"\nno-op rerun: {ours:.1f} ms per added training job (target ≤ 15); the bare "
            f"twin of the same DAG: {bare:.1f} ms"
        )
        if not args.touch:
            per_exp = slope([r["copies"] for r in rows], [r["wall (s)"] for r in rows])
            line += (
                f"; default target: {per_exp:.1f} s per added experiment "
                f"({frameworks.RUST_FRAMEWORKS} runners prebuilt)"
            )
        print(line)
        Path(args.plot).parent.mkdir(parents=True, exist_ok=True)
        plot(rows, Path(args.plot))
        print(f"plot: {args.plot}")


if __name__ == "__main__":
    main()
