"""End-to-end on a real Slurm: a single-node cluster started here (tests/local_slurm.py)
runs a shortened workflow through snakemake-executor-plugin-slurm with
``--profile profiles/slurm``.

Needs root and Debian's slurm-wlm and munge (`scripts/dev/bootstrap --test` installs them);
skipped, with the
reason, where they are missing. Everything the test starts is stopped in the fixture's
teardown, also when the run fails.
"""

from __future__ import annotations

import csv
import re
import time
from collections import Counter

import pytest

from conftest import REPO, enabled_experiments, load_test_config, run_workflow
from local_slurm import LocalSlurm, SlurmStartError, unavailable_reason

pytestmark = [pytest.mark.slurm, pytest.mark.workflow]

#: One experiment: every kind of job the default run sends to Slurm (training in all three
#: frameworks, comparison, localisation, tables), each a few seconds; a second one added
#: only more of the same jobs and about a minute of polling.
EXPERIMENTS = ("a3_adamw",)
STEPS = 5
#: Rules that run on the submit host, never through sbatch (rules/: `localrule: True`;
#: `all` only collects files).
LOCAL_RULES = {"all", "build_candle", "build_burn", "check"}

#: Flags this test adds to the profile, because its cluster is not a real one:
TEST_ONLY_FLAGS = (
    # no slurmdbd here: sacct never answers, so the plugin must ask squeue
    "--slurm-status-command",
    "squeue",
    # no accounts here; plugin 2.8.0 parses this flag but does not read it yet (it tries
    # to guess an account with sacct, warns, and submits without one), so it states the
    # intent for a plugin that honours it
    "--slurm-no-account",
    # the first status query after 2 s instead of 40 s: the jobs take seconds
    "--slurm-init-seconds-before-status-checks",
    "2",
    # keep the Slurm log of every job, to check below that each job ran in Slurm
    "--slurm-keep-successful-logs",
)


def short_config():
    """.test/slurm.yaml: A3 AdamW of the default config, CPU only, with few
    steps, no probes (training jobs are what this test sends to Slurm)."""
    config = load_test_config("slurm")
    experiments = enabled_experiments(config)
    assert tuple(experiments) == EXPERIMENTS
    assert all(exp["steps"] == STEPS for exp in experiments.values())
    return config


@pytest.fixture(scope="module")
def cluster():
    reason = unavailable_reason()
    if reason:
        pytest.skip(f"no local Slurm can be started here: {reason}")
    slurm = LocalSlurm()
    try:
        slurm.start()
    except SlurmStartError as e:
        pytest.fail(f"the local Slurm did not start:\n{e}")
    try:
        yield slurm
    finally:
        slurm.stop()


@pytest.fixture(scope="module")
def slurm_run(cluster, tmp_path_factory):
    workdir = tmp_path_factory.mktemp("slurm")
    config = short_config()
    start = time.monotonic()
    proc = run_workflow(
        workdir,
        config,
        "--profile",
        str(REPO / "profiles" / "slurm"),
        *TEST_ONLY_FLAGS,
        check=False,
        timeout=900,
        env=cluster.env(),
    )
    seconds = time.monotonic() - start
    if proc.returncode != 0:
        pytest.fail(
            f"snakemake through Slurm failed ({proc.returncode}) after {seconds:.0f} s:\n"
            f"{proc.stdout[-6000:]}\n{cluster.logs()}"
        )
    # What the cluster itself says about the jobs (finished jobs stay listed for
    # MinJobAge): id → (state, comment); the plugin writes rule_<rule>[_wildcards_…].
    queue = cluster.run("squeue", "--states=all", "--noheader", "--format=%i|%T|%k")
    assert queue.returncode == 0, queue.stderr
    jobs = {}
    for line in queue.stdout.splitlines():
        job_id, state, comment = line.strip().split("|", 2)
        jobs[job_id] = (state, comment)
    return workdir, proc, jobs, seconds


def planned_jobs(stdout):
    """Snakemake's own "Job stats" table of the run: rule → count."""
    counts = {}
    lines = iter(stdout.splitlines())
    for line in lines:
        if line.strip() == "Job stats:":
            break
    for line in lines:
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            if parts[0] == "total":
                break
            counts[parts[0]] = int(parts[1])
    assert counts, f"no Job stats table in the output:\n{stdout[:3000]}"
    return counts


def rule_of(comment):
    m = re.fullmatch(r"rule_(.+?)(?:_wildcards_.*)?", comment)
    assert m, f"not a job of the plugin: comment {comment!r}"
    return m.group(1)


def test_every_non_local_job_ran_as_a_slurm_job(slurm_run):
    _, proc, jobs, _ = slurm_run
    submitted = set(re.findall(r"has been submitted with SLURM jobid (\d+)", proc.stdout))
    # The jobs Snakemake submitted are the jobs Slurm ran, and each completed.
    assert submitted == set(jobs)
    assert {state for state, _ in jobs.values()} == {"COMPLETED"}
    expected = {r: n for r, n in planned_jobs(proc.stdout).items() if r not in LOCAL_RULES}
    assert Counter(rule_of(comment) for _, comment in jobs.values()) == expected
    # One job per run and dtype (f32, f64); a3_adamw has three torch runs (code paths).
    default = {"torch": {}, "candle": {}}
    runs = [r for e in enabled_experiments(short_config()).values() for r in e.get("runs", default)]
    for framework in ("torch", "candle", "burn"):
        assert expected[f"train_{framework}"] == 2 * sum(r.startswith(framework) for r in runs)
    assert expected["train_burn"] == 2 * len(EXPERIMENTS)


def test_slurm_logged_each_job_and_its_exit_status(cluster, slurm_run):
    workdir, _, jobs, _ = slurm_run
    ctld = cluster.log("slurmctld").read_text()
    for job_id in jobs:
        assert f"_job_complete: JobId={job_id} WEXITSTATUS 0" in ctld
    logs = list((workdir / ".snakemake" / "slurm_logs").rglob("*.log"))
    assert sorted(p.stem for p in logs) == sorted(jobs)
    candle = [p for p in logs if "rule_train_candle" in str(p)]
    assert candle and all("Finished job" in p.read_text() for p in candle)


def test_build_ran_on_the_submit_host(slurm_run):
    workdir, proc, jobs, _ = slurm_run
    assert not any(rule_of(c) == "build_candle" for _, c in jobs.values())
    assert (workdir / "results" / "bin" / "candle-parity-0.11.0-cpu").stat().st_size > 0
    # Local jobs print their message (the cargo command) instead of a Slurm job id.
    cargo = "cargo build --release --locked -p"
    assert f"{cargo} candle-parity (candle 0.11.0, device cpu)" in proc.stdout
    assert not any(rule_of(c) == "build_burn" for _, c in jobs.values())
    backend = "--no-default-features --features ndarray"
    assert f"{cargo} burn-parity {backend} (burn 0.22.1, device cpu)" in proc.stdout


def test_summary_passes(slurm_run):
    workdir, _, _, seconds = slurm_run
    with open(workdir / "results" / "tables" / "summary.csv", encoding="utf-8") as f:
        rows = {r["experiment"]: r for r in csv.DictReader(f)}
    assert set(rows) == set(EXPERIMENTS)
    for r in rows.values():
        assert r["verdict"] == r["expected_verdict"] == "pass"
        assert float(r["worst_dparam"]) <= 1e-6
    for exp in EXPERIMENTS:
        with open(workdir / f"results/tables/{exp}/perstep-cpu.csv", encoding="utf-8") as f:
            assert len(list(csv.DictReader(f))) == STEPS + 1
    print(f"workflow through Slurm: {seconds:.0f} s")
