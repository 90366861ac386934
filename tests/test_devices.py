"""The device axis: dry runs per device, per-device targets, the validity matrix, the Mac
profile, importing another host's traces, and the conda pins."""

import csv
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from parity.core.devices import DEVICES, DTYPES
from parity.plan.frameworks import FRAMEWORKS, unsupported_reason
from parity.plan.plan import Plan
from parity.trace.reader import TraceReader

from conftest import REPO, enabled_experiments, load_config, load_test_config, run_workflow

pytestmark = pytest.mark.workflow


def sgd_only(burn=False, **over):
    """.test/devices.yaml: A3 SGD as a3_sgd_pair (torch and candle), 4 steps, with the
    top-level settings ``over``; with ``burn``, config.yaml's a3_sgd (torch, candle and
    burn) in its place, also for 4 steps."""
    config = load_test_config("devices")
    if burn:
        config["experiments"]["a3_sgd_pair"]["enabled"] = False
        config["experiments"]["a3_sgd"].update(enabled=True, steps=4)
    config.update(over)
    return config


def test_devices_config_is_a3_sgd_with_torch_and_candle():
    config = sgd_only()
    (name,) = enabled_experiments(config)
    exp, a3 = config["experiments"][name], load_config()["experiments"]["a3_sgd"]
    assert name == "a3_sgd_pair" and "runs" not in exp and exp["steps"] == 4
    assert {k: exp[k] for k in ("model", "loss", "data", "optimizer")} == {
        k: a3[k] for k in ("model", "loss", "data", "optimizer")
    }
    assert {r.run for r in Plan(config).runs()} == {"torch", "candle"}
    assert list(enabled_experiments(sgd_only(burn=True))) == ["a3_sgd"]


def planned_traces(stdout):
    """Traces a dry run would write (from the job listing's output lines)."""
    out = set()
    for line in stdout.splitlines():
        m = re.match(r"\s+output: (.*)", line)
        if m:
            out.update(p.strip() for p in m.group(1).split(",") if "/traces/" in p)
    return {Path(p).parent.name + "/" + Path(p).stem for p in out}


def dry(tmp_path, config, *targets):
    return run_workflow(tmp_path, config, "-n", "--cores", "1", *targets)


def test_validity_matrix_excludes_float64_on_metal_and_burn_off_the_cpu():
    cells = {
        (f, d, t): unsupported_reason(f, d, t) for f in FRAMEWORKS for d in DEVICES for t in DTYPES
    }
    assert {k for k, v in cells.items() if v} == {
        ("torch", "metal", "f64"),
        ("candle", "metal", "f64"),
        ("burn", "cuda", "f32"),
        ("burn", "cuda", "f64"),
        ("burn", "metal", "f32"),
        ("burn", "metal", "f64"),
    }


def test_cuda_dry_run_schedules_cuda_runs_and_cpu_references(tmp_path):
    proc = dry(tmp_path, sgd_only(devices=["cuda"]))
    assert planned_traces(proc.stdout) == {
        "a3_sgd_pair/torch-f32-cuda",
        "a3_sgd_pair/torch-f64-cuda",
        "a3_sgd_pair/candle-f32-cuda",
        "a3_sgd_pair/candle-f64-cuda",
        "a3_sgd_pair/torch-f32-cpu",
        "a3_sgd_pair/torch-f64-cpu",  # the reference runs on the CPU
    }
    assert "results/bin/candle-parity-0.11.0-cuda" in proc.stdout
    assert "--features cuda" in proc.stdout


def test_cuda_dry_run_takes_burn_from_the_cpu(tmp_path):
    # burn-parity has only burn's ndarray backend: its cells on cuda are unsupported, so the
    # burn comparisons take burn's CPU runs, and burn_candle its candle reference there too.
    proc = dry(tmp_path, sgd_only(burn=True, devices=["cuda"]))
    traces = planned_traces(proc.stdout)
    assert not any(t.startswith("a3_sgd/burn-") and t.endswith("-cuda") for t in traces)
    assert {"a3_sgd/burn-f32-cpu", "a3_sgd/burn-f64-cpu"} <= traces
    assert {"a3_sgd/candle-f32-cuda", "a3_sgd/candle-f64-cuda"} <= traces


def test_metal_dry_run_never_schedules_float64_on_metal(tmp_path):
    proc = dry(tmp_path, sgd_only(devices=["metal"]))
    assert planned_traces(proc.stdout) == {
        "a3_sgd_pair/torch-f32-metal",
        "a3_sgd_pair/candle-f32-metal",
        "a3_sgd_pair/torch-f32-cpu",
        "a3_sgd_pair/torch-f64-cpu",
        "a3_sgd_pair/candle-f64-cpu",  # the candidate's float64 run, taken from the CPU
    }
    plan = Plan(sgd_only(devices=["metal"]))
    assert [(k.run, k.dtype, k.device) for k, _ in plan.unsupported_cells()] == [
        ("torch", "f64", "metal"),
        ("candle", "f64", "metal"),
    ]


def test_device_target_runs_only_that_device(tmp_path):
    proc = dry(tmp_path, sgd_only(devices=["cpu"]), "cuda")
    traces = planned_traces(proc.stdout)
    assert {t for t in traces if t.endswith("-cpu")} == {
        "a3_sgd_pair/torch-f32-cpu",
        "a3_sgd_pair/torch-f64-cpu",
    }
    assert all(t.endswith(("-cuda", "-cpu")) for t in traces)
    assert "rule summary" not in proc.stdout


def test_device_target_outside_devices_plans_its_probe_batches(tmp_path):
    """`snakemake cuda` with the default `devices: [cpu]` (docs/devices.md): the cuda
    probe batches run every probe (they were refused as running nothing)."""
    probes = {**sgd_only()["probes"], "enabled": True, "select": ["conv1d_grad"], "dtypes": ["f32"]}
    proc = dry(tmp_path, sgd_only(devices=["cpu"], probes=probes), "cuda")
    batches = re.findall(r"results/logs/probes/(\S+?)\.log", proc.stdout)
    assert "torch-f32-cuda" in batches and "candle-f32-cuda" in batches
    assert not any(b.endswith("-metal") for b in batches)


def test_a_missing_device_is_refused_while_the_dag_is_built(tmp_path):
    proc = run_workflow(tmp_path, sgd_only(devices=["cpu", "metal"]), "--cores", "1", check=False)
    assert proc.returncode != 0
    assert "device metal cannot run on this host: Metal needs an Apple-silicon Mac" in proc.stdout
    assert not (tmp_path / "results").exists()


def test_mac_profile_builds_with_accelerate_and_metal(tmp_path):
    config = sgd_only()
    cfg = tmp_path / "test-config.yaml"
    cfg.parent.mkdir(parents=True, exist_ok=True)
    cfg.write_text(yaml.safe_dump(config))
    proc = subprocess.run(
        [
            str(Path(REPO, ".venv/bin/snakemake")),
            "--snakefile",
            str(REPO / "Snakefile"),
            "--directory",
            str(tmp_path),
            "--configfile",
            str(cfg),
            "--profile",
            str(REPO / "profiles/mac"),
            "-n",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "--features accelerate" in proc.stdout and "--features metal" in proc.stdout
    traces = planned_traces(proc.stdout)
    assert "a3_sgd_pair/candle-f32-metal" in traces and "a3_sgd_pair/candle-f64-metal" not in traces


def test_conda_environments_pin_what_requirements_pin():
    pins = {}
    for line in (REPO / "requirements.txt").read_text().splitlines():
        if "==" in line and not line.startswith("#"):
            name, version = line.split("==")
            pins[name.strip().lower()] = version.strip()
    seen = 0
    for env in (REPO / "envs").glob("*.yaml"):
        doc = yaml.safe_load(env.read_text())
        for dep in doc["dependencies"]:
            if isinstance(dep, dict):
                for spec in dep["pip"]:
                    name, version = spec.split("==")
                    assert pins[name.lower()] == version, f"{env.name}: {spec}"
                    seen += 1
    assert seen >= 8


def test_traces_from_another_checkout_are_compared_without_rerunning(tmp_path):
    # Another checkout: the tracked files copied to a folder of their own, run there.
    other = tmp_path / "other-checkout"
    files = subprocess.run(
        ["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    for f in files:
        if (REPO / f).is_file():
            (other / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / f, other / f)
    config = sgd_only()
    run_workflow(other / "work", config, "--cores", "2", snakefile=other / "Snakefile")
    # Here: copy its traces in, declare the CPU imported, and compare.
    here = tmp_path / "here"
    shutil.copytree(other / "work/results/traces", here / "results/traces")
    merged = sgd_only(imported_devices=["cpu"])
    proc = run_workflow(here, merged, "--cores", "2")
    assert "rule train_" not in proc.stdout  # nothing was rerun
    with open(here / "results/tables/summary.csv", encoding="utf-8") as f:
        row = next(csv.DictReader(f))
    theirs = TraceReader(here / "results/traces/a3_sgd_pair/candle-f32-cpu.parquet").meta
    assert row["verdict"] == "pass"
    assert row["candidate_host"] == theirs["host"]
    assert row["candidate_version"] == theirs["framework_version"] == "0.11.0"


def test_an_imported_device_without_traces_is_named(tmp_path):
    proc = run_workflow(tmp_path, sgd_only(imported_devices=["cpu"]), "-n", check=False)
    assert proc.returncode != 0
    assert "results/traces/a3_sgd_pair/torch-f32-cpu.parquet" in proc.stdout
