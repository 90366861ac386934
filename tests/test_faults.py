"""The fault-injection suite: fault settings and instances in the config, each fault kind
changing its run (real runs, a few steps), how the criteria judge a comparison, and the
sensitivity search's bisection."""

import copy
import logging

import numpy as np
import pytest
from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

from parity.compare import maths as compare
from parity.core.config import ConfigError
from parity.detection import sensitivity
from parity.detection import table as detection
from parity.plan.faults import perturbed_settings
from parity.plan.keys import RunKey
from parity.plan.plan import Plan
from parity.plan.runspec import runner_spec
from parity.trace import fixtures
from parity.trace.reader import TraceReader
from parity.train import rust as rust_runner
from parity.train import torch as torch_runner

from conftest import REPO, load_config

LOG = logging.getLogger("test")
SCHEMA = str(REPO / "schemas" / "config.schema.yaml")


@pytest.fixture
def config():
    return copy.deepcopy(load_config())


# ----- configuration -----------------------------------------------------------------


def test_fault_instances_are_runs_and_comparisons_outside_the_default_target(config):
    plan = Plan(config)
    f = plan.faults["eps_in_sqrt"]
    assert (f["experiment"], f["side"], f["run"], f["against"]) == (
        "a3_adamw",
        "candle",
        "candle_fault_eps_in_sqrt",
        "torch",
    )
    c = plan.comparison("a3_adamw", "cpu-fault_eps_in_sqrt")
    assert (c.reference.run, c.candidate.run, c.expect) == ("torch", f["run"], "fail")
    assert c.table("perstep") == "results/tables/a3_adamw/perstep-cpu-fault_eps_in_sqrt.csv"
    settings = plan.run_settings("a3_adamw", f["run"])
    assert settings["fault"] == {"kind": "eps_in_sqrt"}
    assert settings["optimizer"]["implementation"] == "manual"
    # The default target has none of them.
    assert not any("_fault_" in k.run for k in plan.runs())
    assert not any(c.name.startswith("fault_") for c in plan.comparisons())
    assert {c.name for c in plan.fault_comparisons()} == {
        f"fault_{n}" for n in config["faults"]["instances"]
    }
    # A fault on the PyTorch side names its clean run explicitly.
    relu = plan.comparison("a3_adamw", "cpu-fault_relu_grad_at_zero")
    assert (relu.reference.run, relu.candidate.run) == ("torch", "torch_fault_relu_grad_at_zero")
    # The base run's override stays under the instance's: the CNN's candle run keeps adamw.
    conv = plan.run_settings("cnn_adam", "candle_fault_conv1d_strided_kernel")
    assert conv["model"]["conv_impl"] == "conv1d" and conv["optimizer"]["name"] == "adamw"


def test_a_run_without_a_fault_is_unchanged(config):
    """The faults section changes no clean run: same settings, same hash, and the Rust
    spec says explicitly that there is no fault."""
    without = copy.deepcopy(config)
    without.pop("faults")
    with_faults, plain = Plan(config), Plan(without)
    for key in plain.runs():
        assert with_faults.run_settings(key.experiment, key.run) == plain.run_settings(
            key.experiment, key.run
        )
        assert with_faults.config_hash(key.experiment, key.run) == plain.config_hash(
            key.experiment, key.run
        )
    clean = RunKey("a3_adamw", "candle", "f32", "cpu")
    spec = runner_spec(clean, with_faults.run_settings(clean.experiment, clean.run), "f")
    assert spec["fault"] == {"kind": "none"}
    faulty = RunKey("a3_adamw", "candle_fault_skip_update", "f32", "cpu")
    spec = runner_spec(faulty, with_faults.run_settings(faulty.experiment, faulty.run), "f")
    assert spec["fault"] == {"kind": "skip_update", "step": 50}


def instance(config, name, **inst):
    config["faults"]["instances"][name] = inst
    return config


@pytest.mark.parametrize(
    ("inst", "message"),
    [
        (
            {"experiment": "a3_adamw", "run": {"candle": {"fault": {"kind": "relu_grad_at_zero"}}}},
            r"'relu_grad_at_zero' is a fault of the torch side, not of candle \(candle 0.11.0",
        ),
        (
            {"experiment": "a3_adamw", "run": {"torch": {"fault": {"kind": "mse_sum"}}}},
            r"\.run\.torch\.fault\.kind: 'mse_sum' is a fault of the candle side, not of torch",
        ),
        (
            {"experiment": "a3_adamw", "run": {"candle": {"fault": {"kind": "eps_in_sqrt"}}}},
            r"eps_in_sqrt is a fault in the AdamW update; it needs optimizer",
        ),
        (
            {"experiment": "a1_adam", "run": {"candle": {"fault": {"kind": "mse_sum"}}}},
            r"mse_sum needs loss mse",
        ),
        (
            {"experiment": "a3_adamw", "run": {"candle": {"fault": {"kind": "transposed_weight"}}}},
            r"transposed_weight needs an MLP with a square weight",
        ),
        (
            {"experiment": "a3_adamw", "run": {"candle_x": {}}},
            r"faults\.instances\.bad\.run: 'candle_x' is not a run of a3_adamw",
        ),
        (
            {"experiment": "a3_adamw", "run": {"torch_fused": {}}},
            r"faults\.instances\.bad\.against: 'torch_fused' is not a side of a3_adamw's main",
        ),
        (
            {"experiment": "a3_adamw", "run": {"candle": {}}, "against": "torch_x"},
            r"faults\.instances\.bad\.against: 'torch_x' is not a run of a3_adamw",
        ),
    ],
)
def test_fault_config_errors_name_the_key_path(config, inst, message):
    instance(config, "bad", description="x", **inst)
    validate(config, SCHEMA)
    with pytest.raises(ConfigError, match=message):
        Plan(config)


@pytest.mark.parametrize(
    "fault",
    [{"kind": "skip_update"}, {"kind": "mse_sum", "step": 3}, {"kind": "nan_everywhere"}],
)
def test_the_schema_refuses_malformed_faults(config, fault):
    instance(
        config, "bad", description="x", experiment="a3_adamw", run={"candle": {"fault": fault}}
    )
    with pytest.raises(WorkflowError):
        validate(config, SCHEMA)


def test_an_instance_of_an_experiment_not_configured_is_left_out_with_the_reason(config):
    config["experiments"] = {"a3_sgd": config["experiments"]["a3_sgd"]}
    config["framework_summary"] = []
    plan = Plan(config)
    assert [f["name"] for f in plan.faults.values()] == ["mse_sum_sgd"]
    assert plan.faults_left_out["eps_in_sqrt"] == "experiment a3_adamw is not in this config"
    assert plan.sensitivity is None


def test_a_shortened_config_keeps_every_fault_instance(config):
    """Tests cut the steps; a skipped step beyond the last one then skips nothing."""
    for exp in config["experiments"].values():
        exp["steps"] = 5
    plan = Plan(config)
    assert set(plan.faults) == set(config["faults"]["instances"])
    key = RunKey("a3_adamw", "candle_fault_skip_update", "f32", "cpu")
    spec = runner_spec(key, plan.run_settings(key.experiment, key.run), "f")
    assert spec["fault"] == {"kind": "skip_update", "step": 50}


def test_the_sensitivity_run_perturbs_only_the_learning_rate(config):
    plan = Plan(config)
    s = plan.sensitivity
    assert (s["experiment"], s["run"], s["against"]) == ("a3_adamw", "candle", "torch")
    want = plan.run_settings("a3_adamw", "candle")
    assert s["settings"] == want
    assert s["against_settings"] == plan.run_settings("a3_adamw", "torch")
    got = perturbed_settings(s["settings"], 1e-3)
    assert got["optimizer"].pop("lr") == pytest.approx(0.01 * (1 + 1e-3), rel=1e-15)
    want["optimizer"].pop("lr")
    assert got == want
    assert s["settings"]["optimizer"]["lr"] == 0.01  # the clean settings stay as they were


# ----- every fault kind changes its run ----------------------------------------------


@pytest.fixture(scope="module")
def short(tmp_path_factory):
    """The default config cut to 3 float32 steps (skip_update skips step 2), with the
    fixtures of the experiments the faults use."""
    config = copy.deepcopy(load_config())
    for exp in config["experiments"].values():
        exp["steps"] = 3
    config["dtypes"] = ["f32"]
    config["faults"]["instances"]["skip_update"]["run"]["candle"]["fault"]["step"] = 2
    plan = Plan(config)
    tmp = tmp_path_factory.mktemp("faults")
    paths = {}
    for e in {f["experiment"] for f in plan.faults.values()}:
        paths[e] = str(tmp / f"{e}.safetensors")
        fixtures.write(paths[e], plan.fixture_settings(e))
    return plan, paths, tmp


def train(plan, key, fixture, binary, out):
    settings = plan.run_settings(key.experiment, key.run)
    if key.framework == "torch":
        torch_runner.train(key, settings, fixture, str(out), 1, LOG)
    else:
        rust_runner.train(key, settings, fixture, binary, str(out), 1, LOG, None)
    return TraceReader(out, expect=plan.trace_expectation(key))


def faulty_and_clean(plan, paths, tmp, binary, name):
    f = plan.faults[name]
    e = f["experiment"]
    clean_key = RunKey(e, f["base"], "f32", "cpu")
    faulty_key = RunKey(e, f["run"], "f32", "cpu")
    clean = train(plan, clean_key, paths[e], binary, tmp / f"{name}-clean.parquet")
    faulty = train(plan, faulty_key, paths[e], binary, tmp / f"{name}-faulty.parquet")
    return compare.perstep(clean, faulty)


FAULTS = [n for n in load_config()["faults"]["instances"] if n != "relu_grad_at_zero"]


@pytest.mark.parametrize("name", FAULTS)
def test_each_fault_changes_its_run(short, candle_binary, name):
    """The faulty run against the same side's clean run: identical at step 0, different
    in the parameters afterwards (the skipped update from its step on)."""
    plan, paths, tmp = short
    result = faulty_and_clean(plan, paths, tmp, candle_binary, name)
    assert result.step0_identical
    first = next(r["step"] for r in result.rows if r["max_dparam"] != 0)
    assert first == (2 if name == "skip_update" else 1), result.rows
    if name == "step_from_zero":
        # 1/(1 − β⁰) = 1/0: non-finite against the clean run's finite values (closeness: inf)
        assert result.rows[1]["max_dparam"] == np.inf


def test_relu_grad_at_zero_never_fires_on_the_a3_data(short, candle_binary):
    """No pre-activation of A3 is exactly 0 in these steps: the faulty run is the clean
    run bit for bit (which is why no criterion can see it there)."""
    plan, paths, tmp = short
    assert faulty_and_clean(plan, paths, tmp, candle_binary, "relu_grad_at_zero").bitwise_identical


def test_relu_grad_at_zero_changes_the_run_where_a_preactivation_is_zero(tmp_path):
    """A hand-made fixture with zero biases and an all-zero sample: its pre-activations are
    exactly 0 at step 1, where relu'(0) = 1 adds that sample's gradient to fc1.bias."""
    config = {
        "devices": ["cpu"],
        "dtypes": ["f32"],
        "tolerance": 1e-6,
        "experiments": {
            "zero": {
                "model": {"family": "mlp", "sizes": [2, 2, 1], "activation": "relu"},
                "loss": "mse",
                "data": {"seed": 0, "batches": 1, "batch_size": 3},
                "optimizer": {"name": "sgd", "lr": 0.1},
                "steps": 2,
                "runs": {"torch": {}, "torch_relu": {"fault": {"kind": "relu_grad_at_zero"}}},
                "comparisons": {"main": {"reference": "torch", "candidate": "torch_relu"}},
            }
        },
    }
    validate(config, SCHEMA)
    plan = Plan(config)
    fixture = str(tmp_path / "zero.safetensors")
    f32 = np.float32
    fixtures.save(
        fixture,
        {
            # No other sample has a pre-activation of exactly 0.
            "fc1.weight": np.array([[0.5, -0.3], [0.75, 1.0]], f32),
            "fc1.bias": np.zeros(2, f32),
            "fc2.weight": np.array([[1.0, -2.0]], f32),
            "fc2.bias": np.array([0.5], f32),
            "x": np.array([[[0.0, 0.0], [1.0, 2.0], [-1.0, 0.5]]], f32),
            "y": np.array([[[1.0], [0.0], [2.0]]], f32),
        },
        {},
    )
    runs = {
        run: train(plan, RunKey("zero", run, "f32", "cpu"), fixture, None, tmp_path / f"{run}.pq")
        for run in ("torch", "torch_relu")
    }
    result = compare.perstep(runs["torch"], runs["torch_relu"])
    step1 = result.rows[1]
    assert step1["max_dparam"] > 0 and step1["where"].startswith("fc1.bias")


# ----- the criteria ------------------------------------------------------------------


def perstep_result(verdict, tolerance=1e-6, identical=False, tol_exceeded_step=None):
    return {
        "tol_exceeded_step": tol_exceeded_step,
        "verdict": verdict,
        "tolerance": tolerance,
        "bitwise_identical": identical,
        "worst_dparam": 0.0,
        "worst_dloss": 0.0,
    }


def test_apply_criteria_reads_each_criterion_from_the_comparison_results():
    rows = [{"step": s, "max_dparam": v} for s, v in enumerate([0.0, 1e-7, 2e-6, float("nan")])]
    # The per-step job stores the first step beyond the tolerance; detection reads it.
    first = compare.first_beyond(rows, 1e-6)["step"]
    assert first == 2
    assert compare.first_beyond(rows[:2], 1e-6) is None
    diag = {"fp64_rule_first_fail": 3, "f64_divergence_step": None}
    j = detection.apply_criteria(perstep_result("expected-fail", tol_exceeded_step=first), diag)
    assert j.steps == {"max_abs": 2, "fp64_rule": 3, "f64_rounding": None}
    assert j.by == ["max_abs", "fp64_rule"] and j.first_step == 2
    clean = detection.apply_criteria(perstep_result("pass"), {**diag, "fp64_rule_first_fail": None})
    assert clean.by == [] and clean.first_step is None
    # Without float64 runs only the tolerance is judged.
    no64 = detection.apply_criteria(perstep_result("unexpected-pass"), None)
    assert no64.steps["fp64_rule"] == detection.NOT_COMPUTED and no64.flagged["fp64_rule"] is None
    assert no64.by == []


# ----- the sensitivity search --------------------------------------------------------


def test_bisection_on_a_synthetic_monotone_detector():
    seen = []

    def detected(delta):
        seen.append(delta)
        return delta >= 1e-3

    assert sensitivity.bisect_log10(detected, -6.0, 0.0, 3) == (-3.75, -3.0)
    assert seen == [10.0**-3, 10.0**-4.5, 10.0**-3.75]


def test_search_scans_decades_then_bisects_the_first_detected_one():
    def evaluate(delta):  # the worst difference equals δ
        return delta, 7, 7

    found = sensitivity.search(evaluate, 10.0**-5.6, [-9, -1], 2)
    assert [t.delta for t in found.trials] == [10.0**k for k in range(-9, 0)] + [
        10.0**-5.5,
        10.0**-5.75,
    ]
    assert [t.phase for t in found.trials] == ["scan"] * 9 + ["bisection"] * 2
    assert found.bracket == (-5.75, -5.5)
    assert found.threshold == 10.0**-5.5 and found.monotone
    # The threshold outside the range: no bracket.
    assert sensitivity.search(evaluate, 1.0, [-3, -1], 4).bracket is None
    assert sensitivity.search(evaluate, 1e-12, [-3, -1], 4).bracket is None
    # A detector that is not monotone is reported as such.
    bumpy = sensitivity.search(lambda d: (1.0 if d == 1e-3 else d, 1, 1), 1e-2, [-3, -1], 0)
    assert not bumpy.monotone


def test_the_sensitivity_search_of_an_own_model_is_refused_at_its_key():
    """The search retrains its runs inside its own job, where no model factory or port is
    loaded: an own model's experiment is refused when the plan is made, not by a traceback
    after the clean runs trained."""
    from parity.core.config import ConfigError
    from parity.plan.faults import resolve_sensitivity

    experiments = {"mine": {"model": {"family": "own"}, "runs": {"torch": {}, "torch_ref": {}}}}
    sens = {"experiment": "mine", "run": "torch", "against": "torch_ref", "log10_range": [-3, -1]}
    with pytest.raises(ConfigError) as e:
        resolve_sensitivity(sens, {"tolerance": 1e-6}, experiments)
    assert str(e.value).startswith("config: faults.sensitivity.experiment: 'mine' is an own model")
