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
    all_rows = read_csv(workdir / "results/tables/summary.csv")
    assert {r["experiment"] for r in all_rows} == set(config["experiments"])
    rows = {r["experiment"]: r for r in all_rows if r["comparison"] == "main"}
    for r in all_rows:
        assert r["step0_identical"] == "True"
        assert r["verdict"] == r["expected_verdict"], r
    assert rows["a3_wd_mismatch"]["verdict"] == "expected-fail"
    assert rows["cnn_adam_conv1d"]["verdict"] == "expected-fail"
    adamw = rows["a3_adamw"]
    assert 0 < float(adamw["worst_dparam"]) <= 1e-6


def test_f64_runs_agree_to_float64_rounding(short_run):
    workdir, config, _ = short_run
    summary = read_csv(workdir / "results/tables/summary.csv")
    # Comparisons expected to fail are formula differences by design.
    controls = {
        r["experiment"]
        for r in summary
        if r["comparison"] == "main" and r["expected_verdict"] == "expected-fail"
    }
    assert controls == {
        "a3_wd_mismatch",
        "cnn_adam_conv1d",
        "a3_adamw_f32factors",
        "cnn_adam_f32factors",
    }
    for exp in config["experiments"]:
        split = read_csv(workdir / f"results/tables/{exp}/split-cpu.csv")
        assert len(split) == config["experiments"][exp]["steps"] + 1
        assert split[0]["max_dparam"] == "0.0"
        worst_f64 = max(float(row["f64_f64"]) for row in split)
        if exp in controls:
            assert worst_f64 > 1e-6
            continue
        assert worst_f64 <= 1e-12
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
    experiments = load_config()["experiments"]
    runs = [r for e in experiments.values() for r in e.get("runs", {"torch": 0, "candle": 0})]
    comparisons = sum(len(e.get("comparisons", {"main": 0})) for e in experiments.values())
    assert counts["fixture"] == len(experiments)
    assert counts["train_torch"] == 2 * sum(r.startswith("torch") for r in runs)  # f32, f64
    assert counts["train_candle"] == 2 * sum(r.startswith("candle") for r in runs)
    assert counts["build_candle"] == 1
    assert counts["perstep"] == counts["split"] == counts["diagnosis"] == comparisons
    assert counts["figure"] == 3 * comparisons


def test_bad_config_is_refused_before_any_job(tmp_path):
    config = short_config()
    config["experiments"]["a3_adamw"]["optimizer"]["lr"] = -1.0
    proc = run_workflow(tmp_path, config, "--cores", "1", check=False)
    assert proc.returncode != 0
    assert "lr" in proc.stdout and "-1.0" in proc.stdout
    assert not (tmp_path / "results").exists()


def test_adam_equals_adamw_with_zero_decay_exactly_at_every_step(short_run):
    workdir, _, _ = short_run
    rows = read_csv(workdir / "results/tables/a3_adam/perstep-cpu-torch_adamw.csv")
    assert len(rows) == 13
    assert all(r["max_dparam"] == "0.0" for r in rows)
    assert all(r["dloss"] == "0.0" for r in rows[1:])


def test_optimizer_defaults_come_from_both_frameworks(short_run):
    workdir, _, _ = short_run
    rows = {
        (r["framework"], r["optimizer"]): r
        for r in read_csv(workdir / "results/tables/optimizer_defaults.csv")
    }
    assert rows[("torch", "AdamW")]["weight_decay"] == "0.01"
    assert rows[("torch", "Adam")]["weight_decay"] == "0"
    assert rows[("candle", "AdamW")]["lr"] == "0.001"
    assert rows[("candle", "AdamW")]["weight_decay"] == "0.01"
    assert rows[("candle", "AdamW")]["version"] == "0.11.0"
    assert rows[("torch", "SGD")]["lr"] == "0.001"
    assert rows[("candle", "SGD")]["lr"].startswith("required")


def test_framework_summary_has_computed_candle_and_no_burn_numbers(short_run):
    workdir, _, _ = short_run
    rows = read_csv(workdir / "results/tables/framework_summary.csv")
    assert [r["experiment"] for r in rows] == ["a1_adam", "a1_adam", "cnn_adam", "cnn_adam"]
    summary = {
        (r["experiment"], r["comparison"]): r
        for r in read_csv(workdir / "results/tables/summary.csv")
    }
    assert float(rows[0]["candle_vs_pytorch"]) == float(
        summary[("a1_adam", "main")]["final_dparam"]
    )
    assert float(rows[1]["candle_vs_pytorch"]) <= 1e-12
    assert all(r["burn_vs_pytorch"] == "not run" for r in rows)


def test_hand_written_adamw_equals_candle_adamw_bit_for_bit(short_run):
    workdir, _, _ = short_run
    for exp in ("a3_adamw_f32factors", "cnn_adam_f32factors"):
        rows = read_csv(workdir / f"results/tables/{exp}/perstep-cpu-manual_identity.csv")
        assert len(rows) == 13 and all(r["max_dparam"] == "0.0" for r in rows)
        split = read_csv(workdir / f"results/tables/{exp}/split-cpu-manual_identity.csv")
        assert all(r["f64_f64"] == "0.0" for r in split)


def test_float32_factors_are_a_formula_difference_from_step_1(short_run):
    workdir, _, _ = short_run
    rows = {
        (r["experiment"], r["comparison"]): r
        for r in read_csv(workdir / "results/tables/summary.csv")
    }
    for exp in ("a3_adamw_f32factors", "cnn_adam_f32factors"):
        assert rows[(exp, "main")]["f64_divergence_step"] == "1"
        assert rows[(exp, "main")]["fp64_rule_verdict"] == "expected-fail"
    for exp in ("a3_adamw", "a3_sgd", "cnn_adam", "a1_adam"):
        assert rows[(exp, "main")]["f64_divergence_step"] == ""
        assert rows[(exp, "main")]["fp64_rule_verdict"] == "pass"
    diag = read_csv(workdir / "results/tables/a3_adamw/diagnosis-cpu.csv")
    assert diag[1]["relu_flips_f32"] == "0"
    assert (workdir / "results/figures/a3_adamw/diagnosis-cpu.png").exists()
