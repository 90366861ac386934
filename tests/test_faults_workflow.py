"""End-to-end: the ``faults`` target (real torch, real candle) on a shortened config, and
the default target without it."""

import csv

import pytest

from parity.detection.sensitivity import SENSITIVITY_COLUMNS
from parity.detection.table import DETECTION_COLUMNS, FALSE_ALARM_COLUMNS
from parity.plan.plan import Plan

from conftest import enabled_experiments, load_config, load_test_config, run_workflow

pytestmark = pytest.mark.workflow

#: The fault instances of .test/faults.yaml (transposed_weight's experiment is disabled).
KEPT = ("eps_in_sqrt", "lr_scaled", "relu_grad_at_zero", "skip_update", "transposed_weight")
#: config.yaml's a3_adamw with its default runs only (torch and candle).
EXPERIMENT = "a3_adamw_pair"


def faults_config():
    """.test/faults.yaml: A3 AdamW alone (torch and candle, 8 steps), five of the configured
    faults (the transposed weight's experiment left out), and a short sensitivity search."""
    return load_test_config("faults")


def test_faults_config_is_a3_adamw_with_the_kept_faults():
    config = faults_config()
    (name,) = enabled_experiments(config)
    exp, a3 = config["experiments"][name], load_config()["experiments"]["a3_adamw"]
    assert name == EXPERIMENT and "runs" not in exp and "comparisons" not in exp
    assert {k: exp[k] for k in ("model", "loss", "data", "optimizer")} == {
        k: a3[k] for k in ("model", "loss", "data", "optimizer")
    }
    assert exp["steps"] == 8
    plan = Plan(config)
    assert set(plan.faults) == set(KEPT) - {"transposed_weight"}
    assert plan.faults_left_out["transposed_weight"] == "experiment mlp_square is disabled"
    assert plan.faults["skip_update"]["run"] == "candle_fault_skip_update"
    assert plan.run_settings(EXPERIMENT, "candle_fault_skip_update")["fault"]["step"] == 4
    assert plan.sensitivity["experiment"] == EXPERIMENT


def read_csv(path):
    with open(path, encoding="utf-8") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def faults_run(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("faults")
    config = faults_config()
    run_workflow(workdir, config, "--cores", "2", "faults")
    return workdir, config


def test_detection_table_says_what_detects_each_fault(faults_run):
    workdir, _ = faults_run
    with open(workdir / "results/tables/detection.csv", encoding="utf-8") as f:
        assert tuple(next(csv.reader(f))) == DETECTION_COLUMNS
    rows = {r["fault"]: r for r in read_csv(workdir / "results/tables/detection.csv")}
    assert set(rows) == set(KEPT) - {"transposed_weight"}
    eps = rows["eps_in_sqrt"]
    assert eps["detected"] == "yes" and eps["detected_by"] == "max_abs, fp64_rule, f64_rounding"
    assert eps["first_step"] == eps["max_abs_step"] == "1" and eps["verdict"] == "expected-fail"
    assert float(eps["worst_dparam"]) > 1e-6
    skip = rows["skip_update"]
    assert skip["detected"] == "yes" and skip["max_abs_step"] == skip["first_step"] == "4"
    relu = rows["relu_grad_at_zero"]
    assert relu["detected"] == "no" and relu["detected_by"] == ""
    assert relu["bitwise_identical"] == "True" and relu["verdict"] == "unexpected-pass"
    assert relu["pair"] == "torch f32 cpu vs torch_fault_relu_grad_at_zero f32 cpu"
    assert "never fired" in relu["note"]
    md = (workdir / "results/tables/detection.md").read_text()
    assert "| `max_abs` | 3 of 4 | 0 of 1 |" in md
    assert "**transposed_weight**: experiment mlp_square is disabled" in md
    assert (workdir / "results/tables/detection.html").read_text().startswith("<!DOCTYPE html>")
    assert (workdir / "results/figures/detection.png").stat().st_size > 10_000


def test_false_alarms_cover_every_correct_pair(faults_run):
    workdir, _ = faults_run
    with open(workdir / "results/tables/false_alarms.csv", encoding="utf-8") as f:
        assert tuple(next(csv.reader(f))) == FALSE_ALARM_COLUMNS
    (row,) = read_csv(workdir / "results/tables/false_alarms.csv")
    assert (row["experiment"], row["comparison"]) == (EXPERIMENT, "main")
    assert row["false_alarm"] == row["max_abs"] == row["fp64_rule"] == row["f64_rounding"] == "no"
    assert float(row["f64_headroom"]) > 1


def test_sensitivity_brackets_the_smallest_detected_learning_rate_error(faults_run):
    workdir, _ = faults_run
    with open(workdir / "results/tables/sensitivity.csv", encoding="utf-8") as f:
        assert tuple(next(csv.reader(f))) == SENSITIVITY_COLUMNS
    rows = read_csv(workdir / "results/tables/sensitivity.csv")
    assert rows[0]["phase"] == "clean" and float(rows[0]["delta"]) == 0
    assert rows[0]["detected"] == "no"
    scan = [r for r in rows if r["phase"] == "scan"]
    assert [float(r["delta"]) for r in scan] == [1e-5, 1e-4, 1e-3, 1e-2]
    assert len(rows) <= 1 + 4 + 2
    # Whatever the threshold, detection is monotone over these runs, as the table says.
    ordered = sorted(rows, key=lambda r: float(r["delta"]))
    flags = [r["detected"] == "yes" for r in ordered]
    assert flags == sorted(flags)
    assert (
        "detection is monotone in δ over these runs: yes"
        in (workdir / "results/tables/sensitivity.md").read_text()
    )
    assert (workdir / "results/figures/sensitivity.png").stat().st_size > 10_000


def test_the_default_target_has_no_fault_jobs(tmp_path):
    proc = run_workflow(tmp_path, faults_config(), "-n", "--cores", "1")
    assert "_fault_" not in proc.stdout
    for rule in ("detection", "sensitivity", "faults"):
        assert f"rule {rule}:" not in proc.stdout and f"localrule {rule}:" not in proc.stdout


def test_every_fault_with_a_site_is_localised_to_it(faults_run):
    """Issue 15: the localisation of each fault comparison names the quantity the fault
    changes first (config faults.instances.<name>.site); a fault without a site says so."""
    workdir, _ = faults_run
    rows = {r["fault"]: r for r in read_csv(workdir / "results/tables/detection.csv")}
    for name in ("eps_in_sqrt", "lr_scaled", "skip_update"):
        r = rows[name]
        assert (r["expected_site"], r["found_site"], r["site_found"]) == (
            "update:fc1.weight",
            "update:fc1.weight",
            "yes",
        ), name
    assert rows["relu_grad_at_zero"]["expected_site"] == ""
    assert rows["relu_grad_at_zero"]["site_found"] == "-"
    loc = read_csv(workdir / f"results/tables/{EXPERIMENT}/localise-fault_skip_update-cpu.csv")
    verdicts = {r["quantity"]: r["verdict"] for r in loc}
    # The skipped step changes no forward or backward quantity, only the updates.
    assert all(v == "agrees" for q, v in verdicts.items() if not q.startswith("update:"))
    assert verdicts["update:fc1.weight"] == "differs"
