"""The experiment definitions: config → runs and comparisons."""

import copy

import pytest

from parity.core.config import ConfigError
from parity.core.models import count_params
from parity.plan.frameworks import framework_of, unsupported_reason
from parity.plan.keys import RunKey
from parity.plan.plan import Plan
from parity.plan.runspec import runner_spec

from conftest import load_config


def spec_of(plan, key):
    """The Rust run spec of ``key`` as its training job builds it."""
    return runner_spec(key, plan.run_settings(key.experiment, key.run), "f.safetensors")


@pytest.fixture
def config():
    return load_config()


def test_default_plan_runs_every_run_dtype_and_device(config):
    plan = Plan(config)
    runs = plan.runs()
    assert RunKey("a3_adamw", "torch", "f32", "cpu") in runs
    assert RunKey("a3_adamw", "candle", "f64", "cpu") in runs
    assert all(k.device == "cpu" for k in runs)
    assert runs == sorted(set(runs))


def test_main_comparison_writes_spec_paths(config):
    c = Plan(config).comparison("a3_adamw", "cpu")
    assert c.table("perstep") == "results/tables/a3_adamw/perstep-cpu.csv"
    assert c.figure("split") == "results/figures/a3_adamw/split-cpu.png"
    assert c.reference == RunKey("a3_adamw", "torch", "f32", "cpu")
    assert c.candidate.trace == "results/traces/a3_adamw/candle-f32-cpu.parquet"
    assert c.f64_pair == (
        RunKey("a3_adamw", "torch", "f64", "cpu"),
        RunKey("a3_adamw", "candle", "f64", "cpu"),
    )


def test_a3_has_212_parameters(config):
    assert count_params(config["experiments"]["a3_adamw"]["model"]) == 212


def test_metal_f64_is_unsupported_and_split_falls_back_to_cpu(config):
    config["devices"] = ["metal"]
    plan = Plan(config)
    assert unsupported_reason("candle", "metal", "f64")
    assert all(not (k.device == "metal" and k.dtype == "f64") for k in plan.runs())
    c = plan.comparison("a3_adamw", "metal")
    assert c.reference.device == "cpu" and c.candidate.device == "metal"
    assert [k.device for k in c.f64_pair] == ["cpu", "cpu"]


def test_run_overrides_merge_over_the_experiment_optimizer(config):
    config.pop("faults")  # its instances name a3_adamw's run candle, removed here
    exp = config["experiments"]["a3_adamw"]
    exp["runs"] = {"torch": None, "candle_wd0": {"optimizer": {"weight_decay": 0.0}}}
    exp["comparisons"] = {
        "main": {"reference": "torch", "candidate": "candle_wd0", "expect": "fail"}
    }
    plan = Plan(config)
    s = plan.run_settings("a3_adamw", "candle_wd0")
    assert s["optimizer"]["weight_decay"] == 0.0 and s["optimizer"]["lr"] == 0.01
    assert plan.config_hash("a3_adamw", "candle_wd0") != plan.config_hash("a3_adamw", "torch")
    assert plan.comparison("a3_adamw", "cpu").expect == "fail"


def test_runner_spec_is_explicit(config):
    plan = Plan(config)
    spec = spec_of(plan, RunKey("a3_adamw", "candle", "f64", "cpu"))
    assert spec["optimizer"] == {
        "name": "adamw",
        "lr": 0.01,
        "betas": [0.9, 0.999],
        "eps": 1e-8,
        "weight_decay": 0.01,
        "amsgrad": False,
        "implementation": "candle",
        "bias_correction": "f64",
    }
    assert spec["params"][0] == {"name": "fc1.weight", "shape": [16, 8]}
    assert spec["loop"] is None


def test_framework_comes_from_the_run_name():
    assert framework_of("candle_f32factors") == "candle"
    with pytest.raises(ValueError):
        framework_of("jax")


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (
            lambda c: c["experiments"]["a3_adamw"].update(
                comparisons={"main": {"reference": "torch", "candidate": "candel"}}
            ),
            r"experiments.a3_adamw.comparisons.main.candidate: 'candel' is not a run",
        ),
        (
            lambda c: c["experiments"]["a3_adamw"].update(
                optimizer={
                    "name": "adam",
                    "lr": 0.01,
                    "betas": [0.9, 0.999],
                    "eps": 1e-8,
                    "weight_decay": 0.0,
                },
                runs={"torch": None, "candle": {"optimizer": {"implementation": "candle"}}},
            ),
            r"a3_adamw.runs.candle.optimizer.implementation: candle-nn 0.11.0 has no Adam",
        ),
        (
            lambda c: c["experiments"]["a3_sgd"]["optimizer"].update(nesterov=True),
            r"a3_sgd.runs.torch.optimizer.nesterov: Nesterov momentum requires a momentum",
        ),
        (
            lambda c: c["experiments"]["a3_adamw"].update(
                runs={"torch": None, "candle": {"optimizer": {"bias_correction": "f32"}}}
            ),
            r"bias_correction: float32 bias-correction factors need implementation: manual",
        ),
        (
            lambda c: c["experiments"]["a3_adamw"].update(record={"tensors": ["fc9.weight"]}),
            r"record.tensors: 'fc9.weight' is not a parameter",
        ),
    ],
)
def test_config_errors_name_the_key_path(config, mutate, message):
    config = copy.deepcopy(config)
    mutate(config)
    with pytest.raises(ConfigError, match=message):
        Plan(config)


# ----- burn (issue 10) ---------------------------------------------------------------


def test_burn_runs_on_the_cpu_only(config):
    config["devices"] = ["cpu", "cuda", "metal"]
    plan = Plan(config)
    assert "CPU only" in unsupported_reason("burn", "cuda", "f32")
    assert unsupported_reason("burn", "cpu", "f64") is None
    burn = [k for k in plan.runs() if k.framework == "burn"]
    assert burn and {k.device for k in burn} == {"cpu"}
    cells = {(k.run, k.device, k.dtype) for k, _ in plan.unsupported_cells()}
    assert ("burn", "cuda", "f32") in cells and ("burn", "metal", "f64") in cells
    # A burn comparison on cuda takes burn's runs from the CPU, like Metal's float64.
    c = plan.comparison("a1_adam", "cuda-burn")
    assert c.candidate == RunKey("a1_adam", "burn", "f32", "cpu")


def test_without_comparisons_main_compares_pytorch_with_the_rust_run(config):
    """The default comparison follows the runs: candle where there is one, else burn (an
    experiment of burn alone was refused for a candle run it never named)."""
    exp = copy.deepcopy(config["experiments"]["a3_adamw"])
    exp.pop("comparisons", None)
    config["experiments"]["burn_only"] = {**exp, "runs": {"torch": {}, "burn": {}}}
    config["experiments"]["both"] = {**exp, "runs": {"torch": {}, "burn": {}, "candle": {}}}
    plan = Plan(config)
    assert plan.experiments["burn_only"]["comparisons"]["main"]["candidate"] == "burn"
    assert plan.experiments["both"]["comparisons"]["main"]["candidate"] == "candle"


def test_burn_runner_spec_uses_burns_own_optimizers(config):
    plan = Plan(config)
    adam = spec_of(plan, RunKey("a1_adam", "burn", "f64", "cpu"))
    assert adam["optimizer"] == {
        "name": "adam",
        "lr": 0.01,
        "betas": [0.9, 0.999],
        "eps": 1e-8,
        "weight_decay": 0.0,
        "amsgrad": False,
        "implementation": "burn",
        "bias_correction": "f32",
    }
    adamw = spec_of(plan, RunKey("a3_adamw", "burn", "f32", "cpu"))
    assert adamw["optimizer"]["implementation"] == "burn"
    assert adamw["optimizer"]["bias_correction"] == "f32"
    assert adamw["optimizer"]["weight_decay"] == 0.01
    sgd = spec_of(plan, RunKey("a3_sgd", "burn", "f32", "cpu"))
    assert sgd["optimizer"] == {
        "name": "sgd",
        "lr": 0.1,
        "momentum": 0.0,
        "dampening": 0.0,
        "nesterov": False,
        "weight_decay": 0.0,
    }
    cnn = spec_of(plan, RunKey("cnn_adam", "burn", "f32", "cpu"))
    assert cnn["model"]["config"]["conv_impl"] == "conv1d"
    assert (cnn["model"]["input"], cnn["model"]["target"]) == ("float", "classes")


def test_framework_summary_finds_the_burn_comparison(config):
    rows = Plan(config).framework_summary_rows()
    for row in rows:
        burn = row["comparisons"]["burn"]
        assert burn is not None and burn.reference.run == "torch" and burn.candidate.run == "burn"
        assert burn.device == "cpu"


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"optimizer": {"implementation": "manual"}}, r"candle-side settings"),
    ],
)
def test_burn_refuses_what_it_does_not_run(config, override, message):
    config["experiments"]["a3_adamw"]["runs"]["burn_x"] = override
    with pytest.raises(ConfigError, match=r"experiments.a3_adamw.runs.burn_x.*" + message):
        Plan(config)


def test_burn_records_adam_moments_but_sgd_has_none(config):
    config["experiments"]["a3_adamw"]["runs"]["burn_x"] = {"record": {"moments": True}}
    assert Plan(config).run_settings("a3_adamw", "burn_x")["record"]["moments"] is True
    config["experiments"]["a3_sgd"]["runs"]["burn_x"] = {"record": {"moments": True}}
    with pytest.raises(ConfigError, match=r"a3_sgd.runs.burn_x.record.moments.*no moments"):
        Plan(config)


def test_burn_sgd_momentum_is_burns_momentum_config(config):
    """burn's SGD takes momentum, dampening, Nesterov and L2 decay (MomentumConfig,
    WeightDecayConfig): the spec carries them all, explicit."""
    config["experiments"]["a3_sgd"]["optimizer"].update(
        momentum=0.9, nesterov=True, weight_decay=0.01
    )
    spec = spec_of(Plan(config), RunKey("a3_sgd", "burn", "f32", "cpu"))
    assert spec["optimizer"] == {
        "name": "sgd",
        "lr": 0.1,
        "momentum": 0.9,
        "dampening": 0.0,
        "nesterov": True,
        "weight_decay": 0.01,
    }


def test_every_problem_of_a_config_is_named_at_once(config):
    config = copy.deepcopy(config)
    config["experiments"]["a3_sgd"]["optimizer"] = {"name": "sgd", "lr": 0.1, "dampening": 0.1}
    config["experiments"]["a3_sgd"]["comparisons"]["main"]["candidate"] = "candel"
    config["experiments"]["cnn_adam"]["model"] = dict(
        config["experiments"]["cnn_adam"]["model"], kernel=17
    )
    with pytest.raises(ConfigError) as err:
        Plan(config)
    paths = [p.path for p in err.value.problems]
    assert paths == [
        "experiments.a3_sgd.runs.torch.optimizer.dampening",
        "experiments.a3_sgd.runs.candle.optimizer.dampening",
        "experiments.a3_sgd.runs.burn.optimizer.dampening",
        "experiments.a3_sgd.comparisons.main.candidate",
        "experiments.cnn_adam.model.kernel",
    ]
    assert str(err.value).count("config: experiments.") == 5


def test_the_optimizer_defaults_show_the_frameworks_the_runs_use(config):
    """Each Rust framework's defaults need its runner built: a config without burn runs
    (a user's candle port) builds no burn for the defaults table."""
    from parity.report import sealed

    torch_, candle, burn = sealed.DEFAULTS_JSON
    assert sealed.defaults_json(Plan(config)) == [torch_, candle, burn]
    config["only"] = ["a3_adamw"]
    exp = config["experiments"]["a3_adamw"]
    exp["runs"] = {"torch": {}, "candle": {}}
    exp["comparisons"] = {"main": {"reference": "torch", "candidate": "candle"}}
    plan = Plan(config)
    assert {k.framework for k in plan.runs()} == {"torch", "candle"}
    assert sealed.defaults_json(plan) == [torch_, candle]
    assert sealed.page_inputs("optimizer_defaults", plan, None, "t.rst") == [torch_, candle]
    assert sealed.page_inputs("training_loop", plan, None, "t.rst") == ["t.rst", torch_, candle]
