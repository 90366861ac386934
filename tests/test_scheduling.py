"""How the workflow asks Snakemake to order a cold run (issue: a first useful result early).

Three cargo builds side by side on two cores each took 10 to 19 minutes, and the A3 headline
table waited for all of them. So the workflow profile (profiles/default) grants two units of
the resource ``cargo``: the build of the primary candle release takes both (it builds alone),
every other runner build one (two build side by side, so one fills the core that burn's
one-crate-at-a-time steps leave idle); and the jobs the first comparison's tables wait for
(its fixture, its four runs, the build of the primary candle release, the comparison) carry
priority 10, every other job 0. Checked on the DAG Snakemake
itself builds from the default config: the priorities it computed and the resource limit it
applies, not a copy of the rules.

Priority only orders starts: with `--cores 8` on two cores, seven training jobs ran beside
the first build and it took 385 s instead of 137 s alone. So every job but the builds and
the first comparison's own jobs lowers its CPU priority (resource ``nice``, applied by
``parity.core.fileio.job_start``).
"""

import ast
import json
import os
import subprocess
import sys
import textwrap

import yaml

from parity.core.fileio import BACKGROUND_NICE, job_start

from conftest import REPO

#: Builds the default config's DAG in a dry-run working folder with Snakemake's API and
#: prints each job that will run as [rule, wildcards, priority, resources]. Snakemake 9's
#: API has no public call for a job's priority; the DAG's ``update_priority`` is the one the
#: scheduler uses.
DAG_PROBE = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    from snakemake.api import SnakemakeApi
    from snakemake.settings.types import OutputSettings, ResourceSettings

    repo, workdir = Path(sys.argv[1]), Path(sys.argv[2])
    resources = json.loads(sys.argv[3]) if len(sys.argv) > 3 else {}
    with SnakemakeApi(OutputSettings(quiet={"all"})) as api:
        wf = api.workflow(
            resource_settings=ResourceSettings(cores=8, resources=resources),
            snakefile=repo / "Snakefile",
            workdir=workdir,
        )
        workflow = wf.dag().workflow_api._workflow
        workflow._prepare_dag(forceall=False, ignore_incomplete=False, lock_warn_only=True)
        workflow._build_dag()
        dag = workflow.dag
        dag.update_priority()
        jobs = [
            [j.rule.name, dict(j.wildcards_dict), j.priority, dict(j.resources.items())]
            for j in dag.needrun_jobs()
        ]
        print(json.dumps({"jobs": jobs}, default=str))
    """
)


def dag_jobs(tmp_path, resources=None):
    """The jobs of the default config's DAG; ``resources`` as ``--resources`` would grant."""
    out = subprocess.run(
        [sys.executable, "-c", DAG_PROBE, str(REPO), str(tmp_path), json.dumps(resources or {})],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_workflow_profile_allows_two_cargo_builds_at_a_time():
    profile = yaml.safe_load((REPO / "profiles/default/config.yaml").read_text())
    assert profile["resources"] == {"cargo": 2}


def test_only_the_first_comparisons_jobs_and_its_build_go_first(tmp_path):
    found = dag_jobs(tmp_path)
    first = sorted(
        (rule, sorted(w.items())) for rule, w, priority, _ in found["jobs"] if priority == 10
    )
    assert first == sorted(
        [
            ("fixture", [("experiment", "a3_adamw")]),
            ("build_candle", [("device", "cpu"), ("version", "0.11.0")]),
            *(
                (
                    rule,
                    sorted(
                        {"experiment": "a3_adamw", "run": run, "dtype": d, "device": "cpu"}.items()
                    ),
                )
                for rule, run in (("train_torch", "torch"), ("train_candle", "candle"))
                for d in ("f32", "f64")
            ),
            ("compare", [("experiment", "a3_adamw"), ("tag", "cpu")]),
        ]
    )
    others = {p for _, _, p, _ in found["jobs"]} - {10}
    assert others == {0}


def build_units(jobs):
    """{(rule, version): units of ``cargo``} of the build jobs."""
    return {
        (rule, w.get("version")): res.get("cargo")
        for rule, w, _, res in jobs
        if rule.startswith("build_")
    }


def test_the_first_build_runs_alone_and_later_ones_two_at_a_time(tmp_path):
    found = dag_jobs(tmp_path)
    assert build_units(found["jobs"]) == {
        ("build_candle", "0.11.0"): 2,
        ("build_candle", "0.11.1"): 1,
        ("build_burn", "0.22.1"): 1,
        ("build_burn", "0.22.1+flex"): 1,
        ("build_burn", "0.23.0-pre.1+flex"): 1,
    }
    assert all(
        "cargo" not in res for rule, _, _, res in found["jobs"] if not rule.startswith("build_")
    )


def test_granting_one_cargo_unit_still_runs_the_first_build(tmp_path):
    """``--resources cargo=1`` (one build at a time) caps the first build's two units at one,
    rather than leaving a job that can never start."""
    found = dag_jobs(tmp_path, {"cargo": 1})
    assert set(build_units(found["jobs"]).values()) == {1}


def test_only_builds_and_the_first_comparisons_jobs_keep_their_cpu_priority(tmp_path):
    found = dag_jobs(tmp_path)
    for rule, w, priority, res in found["jobs"]:
        if rule.startswith("build_"):
            assert "nice" not in res, rule  # build.py does not call job_start either
        elif priority == 10:
            assert res.get("nice") == 0, (rule, w)
        else:
            assert res.get("nice", BACKGROUND_NICE) == BACKGROUND_NICE, (rule, w)
    assert "job_start" not in (REPO / "scripts/build.py").read_text()
    assert "job_start" not in (REPO / "scripts/build_own.py").read_text()


class _Job:
    """The parts of Snakemake's ``snakemake`` script object that job_start reads."""

    def __init__(self, log, **resources):
        self.log = [str(log)]
        self.resources = resources


CHILD = """
import ast, os, sys
from parity.core.fileio import job_start
class Job:
    log = [sys.argv[1]]
    resources = ast.literal_eval(sys.argv[2])
job_start(Job())
print(os.getpriority(os.PRIO_PROCESS, 0))
"""


def _priority_after(tmp_path, resources: dict) -> int:
    env = dict(os.environ, PYTHONPATH=str(REPO / "scripts"))
    args = [str(tmp_path / "job.log"), repr(resources)]
    out = subprocess.run(
        [sys.executable, "-c", CHILD, *args], capture_output=True, text=True, check=True, env=env
    )
    return int(out.stdout.split()[-1])


def test_job_start_lowers_the_cpu_priority_by_the_jobs_nice(tmp_path):
    before = os.getpriority(os.PRIO_PROCESS, 0)
    assert _priority_after(tmp_path, {}) == min(before + BACKGROUND_NICE, 19)
    assert _priority_after(tmp_path, {"nice": 0}) == before
    assert _priority_after(tmp_path, {"nice": 3}) == min(before + 3, 19)


def test_job_start_refuses_to_raise_the_cpu_priority(tmp_path):
    import pytest

    with pytest.raises(ValueError, match="nice=-1"):
        job_start(_Job(tmp_path / "job.log", nice=-1))


def _warm_body(path):
    """The ``main`` of the parity.adapters module a warm-started adapter hands its body to
    (``run_job(snakemake, <module>.main)``), or None for an adapter that runs its body."""
    body = ast.parse(path.read_text()).body
    if not any("run_job(" in ast.unparse(n) for n in body):
        return None
    imports = {n.module for n in body if isinstance(n, ast.ImportFrom)}
    assert imports <= {"parity.core.warm", "parity.adapters"}, f"{path.name} imports {imports}"
    module = REPO / "scripts/parity/adapters" / path.name
    tree = ast.parse(module.read_text())
    assert all(isinstance(n, ast.FunctionDef | ast.Expr) for n in tree.body), (
        f"{module.name} does more than define functions at import"
    )
    (main,) = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "main"]
    return main.body


def test_every_adapter_lowers_its_priority_before_any_heavy_import():
    """The imports are most of a short job's CPU (torch alone about 2.7 s here): an adapter
    that imported first would run them at full priority beside a build. A warm-started
    adapter (parity.core.warm) is checked by its body in parity.adapters, which is what its
    child runs (the server's one preload of torch runs at the priority Snakemake gave the job
    that started it, before that job's job_start; a server serves only jobs started at that
    priority, and each child lowers its own)."""
    light = {"os", "sys", "pathlib", "parity.core.fileio"}
    scripts = sorted((REPO / "scripts").glob("*.py"))
    assert len(scripts) > 20
    warm = 0
    for path in scripts:
        if path.name in ("build.py", "build_own.py"):
            continue
        body = _warm_body(path)
        warm += body is not None
        body = body or ast.parse(path.read_text()).body
        calls = [
            n for n in body if "job_start(" in ast.unparse(n) and not isinstance(n, ast.ImportFrom)
        ]
        assert calls, f"{path.name} does not call job_start"
        before = [n for n in body if n.lineno < calls[0].lineno]
        heavy = [
            ast.unparse(n)
            for n in before
            if (isinstance(n, ast.ImportFrom) and n.module not in light)
            or (isinstance(n, ast.Import) and not {a.name for a in n.names} <= light)
        ]
        assert heavy == [], f"{path.name} imports {heavy} before job_start"
    assert warm == 6, "the four PyTorch jobs, the comparisons and localisations are warm-started"
