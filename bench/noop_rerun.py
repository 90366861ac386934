"""No-op rerun of the default workflow against a bare Snakefile of the same DAG.

Target: no-op rerun ÷ the bare twin's no-op rerun ≤ 1.3. The bare twin
(``common.mirror_workflow``) has one rule per job of the real DAG with the same input and
output files (logs and benchmark files included) and no code of this project, so the ratio
is what this workflow adds to Snakemake's own cost of its DAG. Both are timed in turns with
`snakemake --version` (``common.interleaved_medians``). Needs the default workflow's
results to be complete: run `snakemake --cores 8` first, or pass ``--workdir`` the folder
of a finished run (``bench/cold_workflow.py --keep DIR``), which is run with
``--directory DIR`` (the Snakefile reads this checkout's config.yaml by its absolute path,
so no ``--configfile``: naming it again would read and merge it twice).

Also printed: what of the rerun is not the workflow's own doing. Snakemake imports every
installed executor plugin when it runs a workflow (not for `--version`), and the Slurm
plugin (snakemake-executor-plugin-slurm 2.8.0, installed for the cluster profile) imports
pandas at module level; its cumulative import time is read from `python -X importtime`.
And the part that is the workflow's own: reading, validating and resolving the config and
the probe files.

    .venv/bin/python bench/noop_rerun.py [--workdir DIR]
"""

import argparse
import re
import statistics
import sys

from common import REPO, SNAKEMAKE, WORK, interleaved_medians, machine, mirror_workflow, table, wall


def plugin_import_seconds(repeat=5) -> tuple[float, float]:
    """(whole plugin, its pandas import): median cumulative import times in seconds of
    ``snakemake_executor_plugin_slurm``, from ``python -X importtime`` (after one warm-up)."""
    cmd = [sys.executable, "-X", "importtime", "-c", "import snakemake_executor_plugin_slurm"]
    wall(cmd)
    plugin, pandas = [], []
    for _ in range(repeat):
        _, out = wall(cmd)
        for line in out.splitlines():
            # "import time: self [us] | cumulative | imported package"
            parts = [p.strip() for p in line.removeprefix("import time:").split("|")]
            if len(parts) == 3 and parts[1].isdigit():
                if parts[2] == "snakemake_executor_plugin_slurm":
                    plugin.append(int(parts[1]) / 1e6)
                elif parts[2] == "pandas":
                    pandas.append(int(parts[1]) / 1e6)
    return statistics.median(plugin), statistics.median(pandas)


OWN = r"""
import sys, time, yaml
sys.path.insert(0, sys.argv[1] + "/scripts")
from snakemake.utils import validate
start = time.perf_counter()
with open(sys.argv[1] + "/config.yaml", encoding="utf-8") as f:
    config = yaml.load(f, Loader=yaml.CSafeLoader)
validate(config, sys.argv[1] + "/schemas/config.schema.json")
from parity.plan.plan import Plan
from parity.probe.plan import ProbePlan
Plan(config)
ProbePlan.from_config(config, sys.argv[1])
print(time.perf_counter() - start)
"""


def default_jobs(base: list[str], cwd) -> int:
    """How many jobs the default DAG has (a dry run of every job, ``--forceall``)."""
    _, out = wall([*base, "--cores", "1", "-n", "--forceall", "--quiet", "rules"], cwd=cwd)
    return int(re.search(r"^total\s+(\d+)$", out, re.MULTILINE)[1])


def own_parsing_seconds(repeat=5) -> float:
    """Median seconds the workflow's own code takes to read, validate and resolve the
    default config and its probe files (snakemake already imported, as in a real run)."""
    cmd = [sys.executable, "-c", OWN, str(REPO)]
    return statistics.median(float(wall(cmd)[1].split()[-1]) for _ in range(repeat))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--workdir", type=lambda p: __import__("pathlib").Path(p).resolve())
    args = parser.parse_args()
    workdir = args.workdir or REPO
    base = [SNAKEMAKE]
    if args.workdir:
        base += ["--snakefile", str(REPO / "Snakefile"), "--directory", str(workdir)]
    _, out = wall([*base, "--cores", "1", "-n"], cwd=workdir)
    if "Nothing to be done" not in out:
        raise SystemExit(f"the default workflow in {workdir} is not complete; run it first")
    jobs = default_jobs(base, workdir)
    medians = interleaved_medians(
        {
            "version": ([SNAKEMAKE, "--version"], REPO),
            "noop": ([*base, "--cores", "1"], workdir),
            "bare": mirror_workflow(workdir, None, WORK / "bare-noop"),
        }
    )
    version, noop, bare = medians["version"], medians["noop"], medians["bare"]
    plugin, pandas = plugin_import_seconds()
    own = own_parsing_seconds()
    print(machine())
    row = {
        "snakemake --version (s)": f"{version:.2f}",
        "jobs": jobs,
        "no-op rerun (s)": f"{noop:.2f}",
        "÷ --version": f"{noop / version:.2f}",
        "bare twin, same DAG: no-op (s)": f"{bare:.2f}",
        "bare ÷ --version": f"{bare / version:.2f}",
        "no-op ÷ bare": f"{noop / bare:.2f}",
        "target": "≤ 1.3",
        # imported by both (Snakemake imports every installed executor plugin)
        "Slurm plugin import (s)": f"{plugin:.2f}",
        "of which pandas (s)": f"{pandas:.2f}",
        "config + probes parsed (s)": f"{own:.2f}",
    }
    print(table([row], list(row)))
