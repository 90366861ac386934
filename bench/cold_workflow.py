"""The cold default workflow on this machine, the candle build included, broken down per
rule from the `benchmark:` files: a fresh working folder and a fresh cargo target folder.

    .venv/bin/python bench/cold_workflow.py [--cores N]
"""

import argparse
import csv
import os
import tempfile
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


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cores", type=int, default=os.cpu_count())
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="parity-cold-") as tmp:
        env = dict(os.environ, CARGO_TARGET_DIR=str(Path(tmp) / "target"))
        start = time.perf_counter()
        wall(
            [
                SNAKEMAKE,
                "--snakefile",
                str(REPO / "Snakefile"),
                "--directory",
                tmp,
                "--configfile",
                str(REPO / "config.yaml"),
                "--cores",
                str(args.cores),
            ],
            cwd=tmp,
            env=env,
        )
        total = time.perf_counter() - start
        per_rule = defaultdict(list)
        for tsv in Path(tmp, "results/benchmarks").rglob("*.tsv"):
            rule = job_group(tsv.relative_to(Path(tmp, "results/benchmarks")))
            with open(tsv, encoding="utf-8") as f:
                per_rule[rule] += [float(r["s"]) for r in csv.DictReader(f, delimiter="\t")]
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
    print(f"cold default workflow, {args.cores} cores: {total:.0f} s wall")
    print(table(rows, list(rows[0])))


if __name__ == "__main__":
    main()
