"""No-op rerun of the default workflow against `snakemake --version` on the same machine.

Target: ratio ≤ 1.5 (nothing heavy is imported while the DAG is built). Needs the default
workflow's results to be complete (run `snakemake --cores 8` first).

Beside it, measured in the same run: the no-op rerun of a generated Snakefile with as many
no-op rules as the default DAG has jobs (``common.bare_snakefile``), so the figure separates
Snakemake's own cost of a DAG that size from this workflow's.

Also printed: what of the rerun is not the workflow's own doing. Snakemake imports every
installed executor plugin when it runs a workflow (not for `--version`), and the Slurm
plugin (snakemake-executor-plugin-slurm 2.8.0, installed for the cluster profile) imports
pandas at module level; its cumulative import time is read from `python -X importtime`.
And the part that is the workflow's own: reading, validating and resolving the config and
the probe files.

    .venv/bin/python bench/noop_rerun.py
"""

import re
import statistics
import sys

from common import REPO, SNAKEMAKE, WORK, bare_workflow, interleaved_medians, machine, table, wall


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
validate(config, sys.argv[1] + "/schemas/config.schema.yaml")
from parity.plan.plan import Plan
from parity.probe.plan import ProbePlan
Plan(config)
ProbePlan.from_config(config, sys.argv[1])
print(time.perf_counter() - start)
"""


def default_jobs() -> int:
    """How many jobs the default DAG has (a dry run of every job, ``--forceall``)."""
    _, out = wall([SNAKEMAKE, "--cores", "1", "-n", "--forceall", "--quiet", "rules"], cwd=REPO)
    return int(re.search(r"^total\s+(\d+)$", out, re.MULTILINE)[1])


def own_parsing_seconds(repeat=5) -> float:
    """Median seconds the workflow's own code takes to read, validate and resolve the
    default config and its probe files (snakemake already imported, as in a real run)."""
    cmd = [sys.executable, "-c", OWN, str(REPO)]
    return statistics.median(float(wall(cmd)[1].split()[-1]) for _ in range(repeat))


if __name__ == "__main__":
    _, out = wall([SNAKEMAKE, "--cores", "1", "-n"], cwd=REPO)
    if "Nothing to be done" not in out:
        raise SystemExit("the default workflow is not complete; run `snakemake --cores 8` first")
    jobs = default_jobs()
    medians = interleaved_medians(
        {
            "version": ([SNAKEMAKE, "--version"], REPO),
            "noop": ([SNAKEMAKE, "--cores", "1"], REPO),
            "bare": bare_workflow(jobs, WORK / "bare-noop"),
        }
    )
    version, noop, bare = medians["version"], medians["noop"], medians["bare"]
    plugin, pandas = plugin_import_seconds()
    own = own_parsing_seconds()
    print(machine())
    columns = [
        "snakemake --version (s)",
        "jobs",
        "no-op rerun (s)",
        "ratio",
        "target",
        "bare Snakefile, same jobs: no-op (s)",
        "its ratio",
        "Slurm plugin import (s)",
        "of which pandas (s)",
        "ratio without the plugin's pandas",
        "config + probes parsed (s)",
    ]
    print(
        table(
            [
                {
                    columns[0]: f"{version:.2f}",
                    columns[1]: jobs,
                    columns[2]: f"{noop:.2f}",
                    columns[3]: f"{noop / version:.2f}",
                    columns[4]: "≤ 1.5",
                    columns[5]: f"{bare:.2f}",
                    columns[6]: f"{bare / version:.2f}",
                    columns[7]: f"{plugin:.2f}",
                    columns[8]: f"{pandas:.2f}",
                    columns[9]: f"{(noop - pandas) / version:.2f}",
                    columns[10]: f"{own:.2f}",
                }
            ],
            columns,
        )
    )
