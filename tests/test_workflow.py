"""End-to-end: the real workflow (real torch, real candle) on a shortened config."""

import copy
import csv

import pytest

from parity.tables import PERSTEP_COLUMNS, SPLIT_COLUMNS

from conftest import load_config, run_workflow

pytestmark = pytest.mark.workflow


def short_config(steps=12):
    """The default config with fewer steps (same experiments, same fixtures)."""
    config = copy.deepcopy(load_config())
    for exp in config["experiments"].values():
        exp["steps"] = min(exp["steps"], steps)
    return config


def read_csv(path):
    with open(path, encoding="utf-8") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def short_run(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("e2e")
    config = short_config()
    proc = run_workflow(workdir, config, "--cores", "2")
    return workdir, config, proc


def test_tables_have_exactly_the_spec_columns(short_run):
    workdir, config, _ = short_run
    for exp in config["experiments"]:
        with open(workdir / f"results/tables/{exp}/perstep-cpu.csv") as f:
            assert tuple(next(csv.reader(f))) == PERSTEP_COLUMNS
        with open(workdir / f"results/tables/{exp}/split-cpu.csv") as f:
            assert tuple(next(csv.reader(f))) == SPLIT_COLUMNS
        for kind in ("perstep", "split"):
            assert (workdir / f"results/figures/{exp}/{kind}-cpu.png").stat().st_size > 0
            assert (workdir / f"results/tables/{exp}/{kind}-cpu.md").read_text().startswith("# ")


def test_step0_identical_and_f32_close_but_not_equal(short_run):
    workdir, config, _ = short_run
    rows = {r["experiment"]: r for r in read_csv(workdir / "results/tables/summary.csv")}
    assert set(rows) == set(config["experiments"])
    for r in rows.values():
        assert r["step0_identical"] == "True"
        assert r["verdict"] == r["expected_verdict"] == "pass"
    adamw = rows["a3_adamw"]
    assert 0 < float(adamw["worst_dparam"]) <= 1e-6


def test_f64_runs_agree_to_float64_rounding(short_run):
    workdir, config, _ = short_run
    for exp in config["experiments"]:
        split = read_csv(workdir / f"results/tables/{exp}/split-cpu.csv")
        assert len(split) == config["experiments"][exp]["steps"] + 1
        assert split[0]["max_dparam"] == "0.0"
        for row in split:
            assert float(row["f64_f64"]) <= 1e-12
        # Each side's f32 run drifts from its own f64 run.
        assert float(split[-1]["torch_f64"]) > 0 and float(split[-1]["candle_f64"]) > 0


def test_perstep_step0_row_has_no_loss_and_no_difference(short_run):
    workdir, _, _ = short_run
    rows = read_csv(workdir / "results/tables/a3_adamw/perstep-cpu.csv")
    assert rows[0]["step"] == "0" and rows[0]["loss_a"] == "" and rows[0]["max_dparam"] == "0.0"
    assert rows[0]["where"] == "fc1.weight[0]"
    assert all(float(r["loss_a"]) > 0 for r in rows[1:])


def test_every_job_left_a_log_and_a_benchmark(short_run):
    workdir, _, _ = short_run
    logs = list((workdir / "results/logs").rglob("*.log"))
    benches = list((workdir / "results/benchmarks").rglob("*.tsv"))
    assert any("train" in str(p) for p in logs) and len(benches) == len(logs)
    candle_log = (workdir / "results/logs/train/a3_adamw/candle-f32-cpu.log").read_text()
    assert "step 12/12 loss" in candle_log


def test_rerun_is_a_no_op_and_check_passes(short_run):
    workdir, config, _ = short_run
    again = run_workflow(workdir, config, "--cores", "2")
    assert "Nothing to be done" in again.stdout
    run_workflow(workdir, config, "--cores", "1", "check")


def test_default_config_dry_run_schedules_every_cpu_job(tmp_path):
    proc = run_workflow(tmp_path, load_config(), "-n", "--cores", "1", "--quiet", "rules")
    counts = {}
    for line in proc.stdout.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            counts[parts[0]] = int(parts[1])
    n_exp = len(load_config()["experiments"])
    assert counts["fixture"] == n_exp
    assert counts["train_torch"] == counts["train_candle"] == 2 * n_exp  # f32 and f64
    assert counts["build_candle"] == 1
    assert counts["perstep"] == counts["split"] == n_exp


def test_bad_config_is_refused_before_any_job(tmp_path):
    config = short_config()
    config["experiments"]["a3_adamw"]["optimizer"]["lr"] = -1.0
    proc = run_workflow(tmp_path, config, "--cores", "1", check=False)
    assert proc.returncode != 0
    assert "lr" in proc.stdout and "-1.0" in proc.stdout
    assert not (tmp_path / "results").exists()
