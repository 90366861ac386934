"""Bad files, diverging runs, interrupted jobs, failing jobs and determinism, on the real
workflow. README "Bad input" lists what the user sees in each case."""

import csv
import logging
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from parity.compare import job as compare_jobs
from parity.compare.maths import ComparisonError
from parity.plan.plan import Plan
from parity.trace import fixtures
from parity.trace.reader import TraceReader

from conftest import (
    REPO,
    SNAKEMAKE,
    enabled_experiments,
    load_config,
    load_test_config,
    run_workflow,
)

pytestmark = pytest.mark.workflow


def only(*names, steps=8):
    """.test/reliability.yaml (A3 SGD, 8 steps, no probes) with config.yaml's experiments
    ``names`` enabled instead, for ``steps`` steps each."""
    config = load_test_config("reliability")
    for name, exp in config["experiments"].items():
        exp["enabled"] = name in names
        if name in names:
            exp["steps"] = steps
    return config


def test_reliability_configs_are_a3_sgd_and_a_small_determinism_run():
    config = load_test_config("reliability")
    default = load_config()["experiments"]
    assert enabled_experiments(config) == {"a3_sgd": {**default["a3_sgd"], "steps": 8}}
    assert {k: e["steps"] for k, e in enabled_experiments(only("a3_sgd", "a1_adam")).items()} == {
        "a3_sgd": 8,
        "a1_adam": 8,
    }
    config = load_test_config("determinism")
    assert config["determinism"] == {"experiments": ["a3_adamw_pair"]}
    assert set(enabled_experiments(config)) == {"a3_sgd", "a3_adamw_pair"}
    exp, a3 = config["experiments"]["a3_adamw_pair"], default["a3_adamw"]
    assert "runs" not in exp and exp["steps"] == config["experiments"]["a3_sgd"]["steps"] == 10
    assert {k: exp[k] for k in ("model", "loss", "data", "optimizer")} == {
        k: a3[k] for k in ("model", "loss", "data", "optimizer")
    }


def summary(workdir, name="summary.csv"):
    with open(workdir / "results/tables" / name, encoding="utf-8") as f:
        return {(r["experiment"], r["comparison"]): r for r in csv.DictReader(f)}


def test_diverging_training_is_recorded_and_reported_not_a_crash(tmp_path):
    config = only("a3_sgd", steps=12)
    config["experiments"]["a3_sgd"]["optimizer"]["lr"] = 1.0e3
    run_workflow(tmp_path, config, "--cores", "2")
    trace = TraceReader(tmp_path / "results/traces/a3_sgd/torch-f32-cpu.parquet")
    assert trace.meta["status"] == "diverged"
    step = trace.diverged_step
    assert step is not None and 1 <= step <= 12
    row = summary(tmp_path)[("a3_sgd", "main")]
    assert "torch f32 diverged at step" in row["status"]
    assert "candle f32 diverged at step" in row["status"]
    assert row["verdict"] == "fail"
    md = (tmp_path / "results/tables/a3_sgd/perstep-cpu.md").read_text()
    assert "diverged at step" in md


@pytest.fixture(scope="module")
def det_run(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("determinism")
    # A3 SGD, and a3_adamw_pair (A3 AdamW with its default runs, torch and candle) with the
    # repeats of its runs, 10 steps each.
    config = load_test_config("determinism")
    run_workflow(workdir, config, "--cores", "2")
    return workdir, config


def test_same_job_twice_gives_bit_identical_traces_in_both_frameworks(det_run):
    workdir, _ = det_run
    rows = summary(workdir)
    for run in ("torch", "candle"):
        r = rows[("a3_adamw_pair", f"determinism_{run}")]
        assert r["pair"] == f"{run} f32 cpu vs {run}_repeat f32 cpu"
        assert r["bitwise_identical"] == "True"
        assert r["verdict"] == "pass"
    a = workdir / "results/traces/a3_adamw_pair/candle-f64-cpu.parquet"
    b = workdir / "results/traces/a3_adamw_pair/candle_repeat-f64-cpu.parquet"
    ra, rb = TraceReader(a), TraceReader(b)
    for x, y in zip(ra.iter_steps(), rb.iter_steps(), strict=True):
        for n in ra.layout.names:
            assert x.tensors[n].tobytes() == y.tensors[n].tobytes()


def test_comparison_refuses_traces_of_another_fixture(det_run, tmp_path):
    workdir, config = det_run
    plan = Plan(config)
    comp = plan.comparison("a3_sgd", "cpu")
    altered = dict(plan.fixture_settings("a3_sgd"))
    altered["data"] = {**altered["data"], "seed": altered["data"]["seed"] + 1}
    other = tmp_path / "altered.safetensors"
    fixtures.write(other, altered)
    with pytest.raises(ComparisonError, match="another fixture than the current one"):
        compare_jobs.perstep_job(
            plan.comparison_job(comp),
            str(workdir / comp.reference.trace),
            str(workdir / comp.candidate.trace),
            str(other),
            tmp_path / "p.csv",
            tmp_path / "p.md",
            tmp_path / "p.json",
            logging.getLogger("test"),
        )
    assert not (tmp_path / "p.csv").exists()


def test_a_missing_fixture_is_redrawn_identically_and_the_run_completes(det_run):
    workdir, config = det_run
    path = workdir / "results/fixtures/a3_sgd.safetensors"
    before = path.read_bytes()
    path.unlink()
    # Tables already made stay valid (nothing reruns); a comparison that is rerun needs
    # the fixture, which is drawn again, byte for byte the same.
    proc = run_workflow(workdir, config, "--cores", "2", "--forcerun", "compare")
    assert "rule fixture" in proc.stdout
    assert path.read_bytes() == before
    assert summary(workdir)[("a3_sgd", "main")]["verdict"] == "pass"


def test_keep_going_summarises_what_ran_and_names_the_failed_job(tmp_path):
    config = only("a3_sgd", "a1_adam", steps=5)
    run_workflow(tmp_path, config, "--cores", "1", "results/fixtures/a1_adam.safetensors")
    fixture = tmp_path / "results/fixtures/a1_adam.safetensors"
    fixture.write_bytes(fixture.read_bytes()[:100])  # truncated
    proc = run_workflow(tmp_path, config, "--cores", "2", "--keep-going", check=False)
    assert proc.returncode != 0
    assert "results/tables/summary.partial.md lists them with verdict 'error'" in proc.stdout
    assert not (tmp_path / "results/tables/summary.csv").exists()  # never a stale one
    rows = summary(tmp_path, "summary.partial.csv")
    assert rows[("a3_sgd", "main")]["verdict"] == "pass"  # what could run, ran
    bad = rows[("a1_adam", "main")]
    assert bad["verdict"] == "error"
    log = re.search(r"see (\S+\.log)", bad["status"]).group(1)
    assert log.startswith("results/logs/train/a1_adam/")
    text = (tmp_path / log).read_text()
    assert "a1_adam.safetensors" in text
    assert "not a readable safetensors file" in text or "reading fixture" in text
    check = run_workflow(tmp_path, config, "--cores", "1", "check", check=False)
    assert check.returncode != 0


def test_a_killed_job_leaves_nothing_a_rerun_would_trust(tmp_path):
    config = only("a3_sgd", steps=60000)
    target = "results/traces/a3_sgd/torch-f32-cpu.parquet"
    cfg = tmp_path / "test-config.yaml"
    run_workflow(tmp_path, config, "--cores", "1", "results/fixtures/a3_sgd.safetensors")
    cmd = [
        SNAKEMAKE,
        "--snakefile",
        str(REPO / "Snakefile"),
        "--directory",
        str(tmp_path),
        "--configfile",
        str(cfg),
        "--cores",
        "1",
        target,
    ]
    proc = subprocess.Popen(
        cmd,
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    log = tmp_path / "results/logs/train/a3_sgd/torch-f32-cpu.log"
    deadline = time.time() + 300
    while time.time() < deadline:  # wait until the run is writing its trace
        if log.exists() and "step 6000/60000" in log.read_text():
            break
        time.sleep(0.2)
    else:
        pytest.fail("the run never reached step 6000")
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    out = tmp_path / target
    assert not out.exists(), "a killed job left a trace a rerun would trust"
    assert list(out.parent.glob(".tmp-*")), "expected the killed writer's temporary file"
    # The user's next steps: unlock the working directory, rerun.
    run_workflow(tmp_path, config, "--unlock")
    run_workflow(tmp_path, config, "--cores", "1", target)
    assert TraceReader(out).steps[-1] == 60000
    assert not list(out.parent.glob(".tmp-*"))


def test_only_safe_loaders_are_used():
    """Tensors come from safetensors and Parquet, YAML through safe loading: no pickle."""
    pattern = re.compile(r"\bpickle\b|torch\.load\(|allow_pickle=True|np\.load\(")
    yaml_load = re.compile(r"yaml\.load\((?!.*SafeLoader)")
    # The one exception: parity.core.warm passes the job's ``snakemake`` object (which
    # Snakemake itself hands the job as a pickle) to a server of the same user, checked at
    # both ends of the socket; no tensor, config or file goes through it.
    allowed = {"scripts/parity/core/warm.py"}
    offenders = []
    for path in [
        *Path(REPO, "scripts").rglob("*.py"),
        *Path(REPO, "rules").glob("*.smk"),
        Path(REPO, "Snakefile"),
    ]:
        for i, line in enumerate(path.read_text().splitlines(), 1):
            if path.relative_to(REPO).as_posix() in allowed and not yaml_load.search(line):
                continue
            if pattern.search(line) or yaml_load.search(line):
                offenders.append(f"{path.relative_to(REPO)}:{i}: {line.strip()}")
    assert offenders == []
