"""Probe batches: 40 probe files through PyTorch, candle and burn in float32 and float64 on
the CPU, the probe table included, from nothing, then partial reruns.

Target (issue 17 item 6): at most 2 minutes on 2 cores (`--cores 2`) for the first run.
The 40 files are the 10 of probes/ and 30 variants of them (renamed, inputs shifted, their
exact values and known bugs dropped), written with a fresh config into a new temporary
folder each time, so nothing is reused but the Rust runners' cargo target folder
($CARGO_TARGET_DIR; a cold one adds the builds, shown as the `build` rows).

Printed: the wall time of each run, the time of each kind of job from its benchmark file
(results/benchmarks/**.tsv), and for the reruns, after touching one probe file (same
content) and after editing one (another tolerance), which jobs ran and which probes each
batch recomputed (its log's "computing probes:" line).

    .venv/bin/python bench/probes.py                     # all three frameworks
    .venv/bin/python bench/probes.py --frameworks torch  # PyTorch only, no table
    .venv/bin/python bench/probes.py --stand-in-runners  # Python stand-ins for the runners

A touched file (same content) reruns nothing: Snakemake compares the checksum of an input
newer than its outputs with the one it recorded. An edited file reruns every batch (each
recomputes that probe only) and the table.
"""

from __future__ import annotations

import argparse
import csv
import os
import re
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import yaml
from common import REPO, SNAKEMAKE, machine, table, wall, write_config

from parity.plan import versions

FRAMEWORKS = ("torch", "candle", "burn")
DTYPES = ("f32", "f64")
VARIANTS = 30


def _shift(node, by: float):
    """``node`` (a number or nested lists of them) with ``by`` added to every number."""
    if isinstance(node, list):
        return [_shift(v, by) for v in node]
    if isinstance(node, (int, float)) and not isinstance(node, bool):
        return node + by
    return node


def variant(doc: dict, k: int) -> dict:
    """Probe document ``doc`` with its float inputs shifted by k/8 (exact in binary) and
    its cases' exact values and known bugs dropped (they no longer hold)."""
    doc = yaml.safe_load(yaml.safe_dump(doc))
    for spec in doc["inputs"].values():
        if spec.get("dtype", "float") != "float":
            continue
        if "values" in spec:
            spec["values"] = _shift(spec["values"], k / 8)
        elif "arange" in spec:
            spec["arange"]["start"] = spec["arange"].get("start", 0) + k
    for case in doc["cases"].values():
        case.pop("exact", None)
        case.pop("known_bug", None)
    return doc


def write_probes(folder: Path) -> list[str]:
    """The 10 probes of probes/ and :data:`VARIANTS` variants of them in ``folder``;
    returns their names."""
    folder.mkdir(parents=True)
    originals = sorted(REPO.glob("probes/*.yaml"))
    names = []
    for path in originals:
        (folder / path.name).write_text(path.read_text())
        names.append(path.stem)
    for k in range(1, VARIANTS + 1):
        path = originals[k % len(originals)]
        name = f"{path.stem}_v{k:02d}"
        doc = variant(yaml.safe_load(path.read_text()), k)
        (folder / f"{name}.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
        names.append(name)
    return names


def config(folder: Path) -> dict:
    """config.yaml with the probes of ``folder``, the CPU and float32 and float64."""
    with open(REPO / "config.yaml", encoding="utf-8") as f:
        cfg = yaml.safe_load(f)
    cfg["probes"] = {
        **cfg.get("probes", {}),
        "folder": str(folder),
        "select": None,
        "dtypes": list(DTYPES),
    }
    cfg["devices"] = ["cpu"]
    cfg["dtypes"] = list(DTYPES)
    # The primary releases only, so the figures stay comparable across the version axis.
    cfg["candle"]["versions"] = [versions.pinned("candle")]
    return cfg


def targets(names: list[str], frameworks: list[str]) -> list[str]:
    """The probe table when every framework runs, else those frameworks' result files."""
    if tuple(frameworks) == FRAMEWORKS:
        return ["results/tables/probes.csv"]
    return [
        f"results/probes/{n}/{fw}-{dt}-cpu.parquet"
        for n in names
        for fw in frameworks
        for dt in DTYPES
    ]


def snakemake(workdir: Path, cfg: Path, goals: list[str]) -> tuple[float, str]:
    """(wall seconds, output) of `snakemake --cores 2 goals` in ``workdir``."""
    cmd = [SNAKEMAKE, "--snakefile", str(REPO / "Snakefile"), "--directory", str(workdir),
           "--configfile", str(cfg), "--cores", "2", *goals]  # fmt: skip
    return wall(cmd, cwd=workdir)


def job_times(workdir: Path, since: float) -> list[dict]:
    """Per kind of job (a probe batch by framework, the table, a build): how many jobs and
    their seconds, from the benchmark files written after ``since``."""
    kinds = defaultdict(list)
    for tsv in (workdir / "results/benchmarks").rglob("*.tsv"):
        if tsv.stat().st_mtime < since:
            continue
        rel = tsv.relative_to(workdir / "results/benchmarks")
        if rel.parts[0] == "probes":
            kind = (
                "probes table" if tsv.stem == "table" else f"probe batch {tsv.stem.split('-')[0]}"
            )
        else:
            kind = f"{rel.parts[0]} {tsv.stem.split('-')[0]}"
        with open(tsv, encoding="utf-8") as f:
            row = next(csv.DictReader(f, delimiter="\t"))
        kinds[kind].append(float(row["s"]))
    return [
        {"job kind": k, "jobs": len(v), "seconds (sum)": f"{sum(v):.1f}", "max": f"{max(v):.1f}"}
        for k, v in sorted(kinds.items())
    ]


def recomputed(workdir: Path, since: float) -> list[dict]:
    """Each batch that ran after ``since`` and the probes it computed (its log's last
    "computing probes:" line)."""
    out = []
    for log in sorted((workdir / "results/logs/probes").glob("*-*-*.log")):
        if log.stat().st_mtime < since:
            continue
        lines = re.findall(r"computing probes: (.*)", log.read_text())
        out.append({"batch": log.stem, "computed": lines[-1] if lines else "?"})
    return out


def ran(output: str) -> str:
    """The jobs a Snakemake run ran, by rule (its job stats table)."""
    counts = []
    for line in output.splitlines():
        parts = line.split()
        if (
            len(parts) == 2
            and parts[1].isdigit()
            and parts[0].isidentifier()
            and parts[0] != "total"
        ):
            counts.append(f"{parts[0]} {parts[1]}")
    return ", ".join(counts) or "nothing"


#: ``--stand-in-runners``: a Python stand-in for a runner's ``probe`` subcommand on a
#: ProbeBatch (header, one ok result of value 0 per quantity, end), for timing the batches
#: and the table while the real runners do not read batches yet. Its values are not
#: the framework's: the table's verdicts are meaningless then, its time is not.
STAND_IN = r"""#!{python}
import json, struct, sys
import numpy as np
from safetensors.numpy import save

def frame(meta, tensors=None):
    body = save(tensors or {{}}, metadata=meta)
    sys.stdout.buffer.write(struct.pack("<Q", len(body)) + body)

spec = json.load(open(sys.argv[sys.argv.index("--spec") + 1]))
frame({{"kind": "header", "framework": "{framework}", "framework_version": "stand-in",
        "compiler": "none", "device_detail": "cpu", "features": "", "threads": "1"}})
for p in spec["probes"]:
    for case in p["cases"]:
        for q in case["compare"]:
            frame({{"kind": "result", "probe": p["probe"], "case": case["name"],
                    "quantity": q, "status": "ok", "message": ""}},
                  {{"values": np.zeros(1)}})
frame({{"kind": "end"}})
"""


def stand_in_runners(workdir: Path) -> None:
    """Put :data:`STAND_IN` where the build rules leave the runners (results/bin), so that
    no build runs and every batch uses the stand-in."""
    import sys

    for fw in ("candle", "burn"):
        path = workdir / f"results/bin/{fw}-parity-{versions.pinned(fw)}-cpu"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(STAND_IN.format(python=sys.executable, framework=fw))
        path.chmod(0o755)


def main() -> None:
    global DTYPES
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frameworks", default=",".join(FRAMEWORKS),
                    help="comma-separated (default: torch,candle,burn and the table)")  # fmt: skip
    ap.add_argument("--stand-in-runners", action="store_true",
                    help="Python stand-ins for the Rust runners (timing only)")  # fmt: skip
    ap.add_argument("--dtypes", default=",".join(DTYPES),
                    help="comma-separated probe dtypes (f32, f64, f16, bf16)")  # fmt: skip
    args = ap.parse_args()
    DTYPES = tuple(args.dtypes.split(","))
    frameworks = [f for f in FRAMEWORKS if f in args.frameworks.split(",")]
    print(machine())
    print(f"CARGO_TARGET_DIR={os.environ.get('CARGO_TARGET_DIR', '(unset: rust/target)')}")
    with tempfile.TemporaryDirectory(prefix="bench-probes-") as tmp:
        tmp = Path(tmp)
        names = write_probes(tmp / "probes")
        cfg = write_config(tmp / "bench-config.yaml", config(tmp / "probes"))
        work = tmp / "work"
        work.mkdir()
        if args.stand_in_runners:
            stand_in_runners(work)
            print("candle and burn: Python stand-ins (timing only; the table's verdicts are not)")
        goals = targets(names, frameworks)
        print(f"{len(names)} probe files × {', '.join(frameworks)} × {', '.join(DTYPES)} (cpu)")

        start = time.time()
        seconds, out = snakemake(work, cfg, goals)
        print(f"\nfirst run: {seconds:.1f} s wall (target ≤ 120 s); jobs: {ran(out)}")
        print(table(job_times(work, start), ["job kind", "jobs", "seconds (sum)", "max"]))

        edited = tmp / "probes" / f"{names[1]}.yaml"
        for what in ("touched", "edited"):
            time.sleep(1)  # a later modification time than every output
            if what == "touched":
                os.utime(edited)
            else:
                doc = yaml.safe_load(edited.read_text())
                doc["tolerance"] = {**doc.get("tolerance", {}), "f32": 1e-3}
                edited.write_text(yaml.safe_dump(doc, sort_keys=False))
            start = time.time()
            seconds, out = snakemake(work, cfg, goals)
            print(f"\n{edited.name} {what}: rerun {seconds:.1f} s wall; jobs: {ran(out)}")
            if "Nothing to be done" in out:
                print("(nothing to do: the file's checksum is the one Snakemake recorded)")
                continue
            print(table(recomputed(work, start), ["batch", "computed"]))
            print(table(job_times(work, start), ["job kind", "jobs", "seconds (sum)", "max"]))


if __name__ == "__main__":
    main()
