"""The training loop (docs/loop.md) without running a workflow: the config's vocabulary
resolved and refused, what each framework runs, the scalars in the trace, the scalar rules
and the loop culprits."""

from __future__ import annotations

import copy
import subprocess
import sys

import numpy as np
import pytest

from parity.compare import maths
from parity.core.config import ConfigError
from parity.localise import job
from parity.localise.job import scalar_culprit, update_culprit
from parity.plan.keys import RunKey
from parity.plan.loop import replay_limits, resolve_groups, resolve_schedule
from parity.plan.plan import Plan
from parity.plan.runspec import runner_spec
from parity.trace.reader import TraceReader
from parity.trace.schema import StepRecord, TraceError, TraceLayout
from parity.trace.writer import TraceWriter

from conftest import REPO, base_meta, load_config

PARAMS = ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
SGD = {"name": "sgd", "lr": 0.1, "weight_decay": 0.01}


# ----- the vocabulary, resolved ----------------------------------------------------------


def test_groups_hold_every_parameter_once_with_explicit_settings():
    groups = resolve_groups("g", [{"params": ["*.bias"], "weight_decay": 0.0}, {}], SGD, PARAMS)
    assert groups == [
        {"params": ["fc1.bias", "fc2.bias"], "lr": 0.1, "weight_decay": 0.0},
        {"params": ["fc1.weight", "fc2.weight"], "lr": 0.1, "weight_decay": 0.01},
    ]


@pytest.mark.parametrize(
    ("groups", "message"),
    [
        (
            [{"params": ["fc1.*"]}, {"params": ["*.bias"]}],
            r"g.1.params: parameter 'fc1.bias' is in group 0 and group 1",
        ),
        ([{"params": ["*.bias"]}], r"g: parameter 'fc1.weight' is in no group"),
        ([{"params": ["fc3.*"]}, {}], r"g.0.params: 'fc3.\*' matches no parameter"),
        ([{}, {"params": ["*.bias"]}], r"g: only the last group may leave out params"),
        ([{"params": ["*"]}, {}], r"g.1: the group holds no parameter"),
    ],
)
def test_groups_that_do_not_partition_the_parameters_are_refused_by_name(groups, message):
    with pytest.raises(ConfigError, match=message):
        resolve_groups("g", groups, SGD, PARAMS)


def test_schedules_get_pytorchs_defaults_written_out():
    s = resolve_schedule("s", {"name": "OneCycleLR", "max_lr": 0.1, "total_steps": 20}, SGD, 20)
    assert s["order"] == "after" and s["pct_start"] == 0.3 and s["cycle_momentum"] is True
    seq = resolve_schedule(
        "s",
        {
            "name": "SequentialLR",
            "milestones": [3],
            "schedulers": [
                {"name": "LinearLR", "start_factor": 0.5},
                {"name": "ExponentialLR", "gamma": 0.9},
            ],
        },
        SGD,
        20,
    )
    assert seq["schedulers"][0] == {
        "name": "LinearLR",
        "start_factor": 0.5,
        "end_factor": 1.0,
        "total_iters": 5,
    }


@pytest.mark.parametrize(
    ("schedule", "message"),
    [
        ({"name": "OneCycleLR", "max_lr": 0.1, "total_steps": 10}, r"s.total_steps: 10 is fewer"),
        (
            {"name": "MultiStepLR", "milestones": [5, 3]},
            r"s.milestones: \[5, 3\] is not increasing",
        ),
        (
            {
                "name": "SequentialLR",
                "milestones": [2, 4],
                "schedulers": [{"name": "StepLR", "step_size": 2}],
            },
            r"1 schedulers need 0 milestones",
        ),
        (
            {
                "name": "SequentialLR",
                "milestones": [2],
                "schedulers": [
                    {"name": "LinearLR"},
                    {"name": "OneCycleLR", "max_lr": 0.1, "total_steps": 20},
                ],
            },
            r"s.schedulers.1: a SequentialLR chains",
        ),
    ],
)
def test_what_pytorch_refuses_of_a_schedule_is_refused(schedule, message):
    with pytest.raises(ConfigError, match=message):
        resolve_schedule("s", schedule, SGD, 20)


@pytest.fixture
def config():
    """config.yaml with only loop_sgd and loop_adam."""
    c = load_config()
    c["only"] = ["loop_sgd", "loop_adam"]
    return c


def spec_of(plan, key):
    """The Rust run spec of ``key`` as its training job builds it."""
    return runner_spec(key, plan.run_settings(key.experiment, key.run), "f.safetensors")


def _plan_with(config, run: str, override: dict, exp: str = "loop_sgd") -> Plan:
    config = copy.deepcopy(config)
    config["experiments"][exp]["runs"][run] = override
    return Plan(config)


def test_candle_runs_the_porters_recipes_and_burn_its_built_ins(config):
    plan = Plan(config)
    candle = plan.run_settings("loop_sgd", "candle")
    assert candle["optimizer"]["implementation"] == "recipe"
    assert candle["loop"]["clip"] == {"norm": 0.1}
    assert plan.run_settings("loop_sgd", "burn")["loop"]["clip"] == {"norm": 0.1}
    # burn's GradientClipping::Norm, by default: a norm per parameter, named so in the spec
    builtin = plan.run_settings("loop_sgd", "burn_builtin_clip")["loop"]["clip"]
    assert builtin == {"norm_per_parameter": 0.1}
    spec = spec_of(plan, RunKey("loop_sgd", "burn_builtin_clip", "f32", "cpu"))
    assert spec["loop"]["clip"] == {"norm_per_parameter": 0.1}
    assert spec["loop"]["schedule"]["order"] == "after"
    assert spec["loop"]["schedule"]["kind"]["name"] == "SequentialLR"
    assert [g["params"] for g in spec["loop"]["groups"]] == [
        ["fc1.bias", "fc2.bias"],
        ["fc1.weight", "fc2.weight"],
    ]
    assert spec["loop"]["accumulate"] == {"micro_batches": 4, "reduction": "mean"}
    # a run without a loop has none in its spec
    config["only"] = ["a3_sgd"]
    assert spec_of(Plan(config), RunKey("a3_sgd", "candle", "f32", "cpu"))["loop"] is None


def test_one_cycle_momentum_makes_candles_plain_sgd_the_recipe_and_is_refused_on_burn(config):
    exp = config["experiments"]["loop_sgd"]
    exp["optimizer"] = {"name": "sgd", "lr": 0.05}
    exp["schedule"] = {"name": "OneCycleLR", "max_lr": 0.1, "total_steps": 20}
    with pytest.raises(ConfigError, match=r"loop_sgd.schedule.cycle_momentum: burn's optimizers"):
        Plan(config)
    exp["runs"] = {"torch": {}, "candle": {}}
    exp["comparisons"] = {"main": {"reference": "torch", "candidate": "candle"}}
    assert Plan(config).run_settings("loop_sgd", "candle")["optimizer"]["implementation"] == (
        "recipe"
    )


@pytest.mark.parametrize(
    ("override", "message"),
    [
        (
            {"schedule": {"name": "ExponentialLR", "gamma": 0.9}, "optimizer": {"lr": 2.0}},
            r"burn_x.schedule: burn's Exponential scheduler refuses an initial learning rate 2.0",
        ),
        (
            {"schedule": {"name": "CosineAnnealingLR", "T_max": 5, "eta_min": 0.5}},
            r"runs.burn_x.schedule.eta_min: burn's cosine scheduler refuses a minimum",
        ),
        ({"clip": {"value": 0.5}, "clip_impl": "total_norm"}, r"burn_x.clip_impl: clip_impl"),
    ],
)
def test_burn_refuses_what_its_built_ins_refuse(config, override, message):
    with pytest.raises(ConfigError, match=message):
        _plan_with(config, "burn_x", override)


def test_a_run_with_a_loop_or_optimizer_state_is_not_replayed(config):
    plan = Plan(config)
    loc = plan.localise_params(next(c for c in plan.comparisons() if c.name == "early"))
    assert (
        "does not run the training loop's accumulate, param_groups, schedule"
        in (loc["unreplayable"])
    )
    assert loc["loop_groups"]["candle_early"] == [
        ["fc1.bias", "fc2.bias"],
        ["fc1.weight", "fc2.weight"],
    ]
    mlp = {"family": "mlp"}
    momentum = {"model": mlp, "optimizer": {"name": "sgd", "lr": 0.1, "momentum": 0.9}}
    why, groups = replay_limits({"torch": momentum}, lambda: PARAMS)
    assert "SGD's momentum buffers" in why and groups == {"torch": [PARAMS]}
    plain = {"model": mlp, "optimizer": SGD}
    assert replay_limits({"torch": plain}, lambda: PARAMS) == (None, {})
    own = {"model": {"family": "own", "torch": {"optimizer": "model:optimizer"}}, "optimizer": SGD}
    why, _ = replay_limits({"torch": own}, lambda: PARAMS)
    assert "the state of the user's own PyTorch optimizer" in why


# ----- the scalars in the trace ----------------------------------------------------------


def _write(path, scalars_by_step, steps=2):
    layout = TraceLayout.of("f32", [("w", (2,))])
    with TraceWriter(path, layout, base_meta(steps=steps)) as w:
        for k in range(steps + 1):
            w.write_step(
                k,
                None if k == 0 else 1.0,
                {"w": np.full(2, k, dtype=np.float32)},
                scalars=scalars_by_step[k],
            )
    return path


def test_scalars_round_trip_exactly_and_are_all_or_none(tmp_path):
    third = 1 / 3
    s1 = {"lr": [0.1, third], "grad_norm": 0.5, "clip_coef": None}
    s2 = {"lr": [0.2, third / 2], "grad_norm": 0.25, "clip_coef": 0.9}
    r = TraceReader(_write(tmp_path / "t.parquet", [None, s1, s2]))
    assert r.has_scalars
    assert [rec.scalars for rec in r.iter_steps()] == [None, s1, s2]
    assert not TraceReader(_write(tmp_path / "n.parquet", [None, None, None])).has_scalars
    with pytest.raises(TraceError, match="scalars"):
        _write(tmp_path / "bad.parquet", [None, s1, None])


def _rec(lr, grad_norm=1.0, clip=None, step=1):
    return StepRecord(step, 1.0, scalars={"lr": lr, "grad_norm": grad_norm, "clip_coef": clip})


def test_scalar_rules_admit_float64_rounding_of_a_rate_and_nothing_more():
    lr = 0.048311
    assert maths.scalar_differences(_rec([lr]), _rec([lr * (1 + 2**-45)])) == []
    assert maths.scalar_differences(_rec([lr]), _rec([lr * (1 + 2**-30)]))[0]["scalar"] == (
        "lr[group 0]"
    )
    # a float32 norm computed in another order differs in its last bits only
    assert maths.scalar_differences(_rec([lr], 0.5627399), _rec([lr], 0.56273997)) == []
    got = maths.scalar_differences(_rec([lr], 0.5), _rec([lr], 2.0))
    assert got == [{"scalar": "grad_norm", "a": 0.5, "b": 2.0}]
    assert maths.scalar_differences(_rec([lr]), _rec([lr, lr]))[0] == {
        "scalar": "param_groups",
        "a": 1,
        "b": 2,
    }
    assert maths.scalar_differences(_rec([lr], clip=0.5), _rec([lr]))[0]["scalar"] == "clip_coef"


def test_loop_culprits_come_from_the_scalars_then_the_group_of_the_update():
    first = {"step": 1, "scalar": "lr[group 0]", "a": 0.0, "b": 0.0033}
    perstep = {"scalar_first": first, "tol_exceeded_step": 1, "tol_exceeded_params": ["w"]}
    got = scalar_culprit(perstep)
    assert (got["culprit"], got["culprit_phase"], got["step"]) == ("loop:lr[group 0]", "loop", 1)
    # a scalar that differs only after the parameters left the tolerance is not the culprit
    assert scalar_culprit({**perstep, "scalar_first": {**first, "step": 3}}) is None
    loc = {"loop_groups": {"torch": [["fc1.bias", "fc2.bias"], ["fc1.weight", "fc2.weight"]]}}
    beyond = {
        "tol_exceeded_step": 2,
        "tol_exceeded_params": ["fc1.bias", "fc2.bias"],
        "worst_dparam": 0.1,
    }
    got = update_culprit(beyond, loc, "torch")
    assert (got["culprit"], got["culprit_phase"], got["step"]) == ("update:group 0", "update", 2)
    mixed = {**beyond, "tol_exceeded_params": ["fc1.bias", "fc2.weight"]}
    assert update_culprit(mixed, loc, "torch")["culprit"] == "update:fc1.bias,fc2.weight"
    assert update_culprit(beyond, {}, "torch") is None  # replayable: the replay names it


def test_the_page_says_whether_the_culprit_was_read_off_the_traces_or_replayed(config):
    comp = next(c for c in Plan(config).comparisons() if c.name == "decay_all")
    loc = {"loop_groups": {"torch": [["fc1.bias", "fc2.bias"], ["fc1.weight", "fc2.weight"]]}}
    beyond = {"tol_exceeded_step": 2, "tol_exceeded_params": ["fc1.bias"], "worst_dparam": 0.1}
    read = update_culprit(beyond, loc, "torch")
    assert "- named at step 2 (" in job._markdown(comp, read)
    # an update the replay found guilty (e.g. candle's AdamW with float32 factors) was replayed
    replayed = {**read, "culprit": "update:fc1.bias", "method": "replay", "notes": []}
    page = job._markdown(comp, replayed)
    assert "- replayed step 2 (" in page and "named at" not in page


def test_the_rust_schedules_are_pytorchs_golden_values():
    """rust/parity-common/src/schedule/golden.json holds what PyTorch 2.15 computes for each
    schedule (the Rust tests hold the Rust side to it); regenerated here and compared."""
    proc = subprocess.run(
        [sys.executable, "scripts/dev/schedule_golden.py", "--check"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
