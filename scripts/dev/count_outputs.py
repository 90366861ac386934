#!/usr/bin/env python3
"""Count the files the default target leaves under results/, from its DAG, without
running it: every job's declared outputs, log and benchmark (Snakemake API, the same
DAG a dry run builds, in an empty working directory so every job is needed), by folder
under results/; plus the HTML page each Markdown table has beside it, which the jobs
write undeclared (parity.render.tables.write_twins). A localised comparison's figure
(PNG and SVG, undeclared: parity.localise.job) is counted apart, since whether a
comparison is localised depends on its verdict.

Usage: scripts/dev/count_outputs.py [REPO] (default: this checkout). Prints JSON.
"""

import json
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

PROBE = textwrap.dedent(
    """
    import json, sys
    from collections import Counter
    from pathlib import Path
    from snakemake.api import SnakemakeApi
    from snakemake.settings.types import OutputSettings, ResourceSettings

    repo, workdir = Path(sys.argv[1]), Path(sys.argv[2])
    with SnakemakeApi(OutputSettings(quiet={"all"})) as api:
        wf = api.workflow(
            resource_settings=ResourceSettings(cores=8), snakefile=repo / "Snakefile",
            workdir=workdir,
        )
        workflow = wf.dag().workflow_api._workflow
        workflow._prepare_dag(forceall=False, ignore_incomplete=False, lock_warn_only=True)
        workflow._build_dag()
        files, rules = set(), Counter()
        for job in workflow.dag.needrun_jobs():
            rules[job.rule.name] += 1
            out = [str(f) for f in job.output] + [str(f) for f in job.log]
            out += [str(job.benchmark)] if job.benchmark else []
            files |= {f for f in out if f.startswith("results/")}
        html = {f[:-3] + ".html" for f in files if f.endswith(".md") and
                f.startswith("results/tables/") and f != "results/README.md"}
        from parity.plan.plan import Plan
        fails = [c for c in Plan(workflow.config).comparisons()
                 if "localise" in c.kinds and c.expect == "fail"]
        print(json.dumps({"files": sorted(files), "html": sorted(html - files),
                          "rules": dict(rules), "localised": len(fails)}))
    """
)


def count(repo: Path) -> dict:
    """The default target's files under results/ for the checkout ``repo``, by folder."""
    with tempfile.TemporaryDirectory() as work:
        proc = subprocess.run(
            [sys.executable, "-c", PROBE, str(repo), work],
            capture_output=True,
            text=True,
            check=True,
            cwd=repo,
        )
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    every = found["files"] + found["html"]
    by_dir: dict[str, int] = {}
    for f in every:
        top = f.split("/")[1] if f.count("/") > 1 else "(top)"
        by_dir[top] = by_dir.get(top, 0) + 1
    return {
        "declared": len(found["files"]),
        "undeclared_html": len(found["html"]),
        "total": len(every),
        "by_folder": dict(sorted(by_dir.items())),
        "localise_jobs": found["rules"].get("localise", 0),
        # expected to fail, so localised: a figure each (PNG, SVG), if nothing else fails
        "localised_expected": found["localised"],
        "jobs": sum(found["rules"].values()),
    }


if __name__ == "__main__":
    repo = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parents[2])
    print(json.dumps(count(repo), indent=1))
