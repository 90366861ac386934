"""A user's own model (docs/own-model.md), the PyTorch side and the plan: the model card
read from the module itself, its fixture from the module's own initialisation, training
and replay through the module, the dataflow its forward hooks give the localisation, the
check of a Rust port's parameters, and every kind of bad input named by its key."""

from __future__ import annotations

import copy
import json
import logging
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from parity.core.config import ConfigError
from parity.core.models import model_params
from parity.localise import replay, walk
from parity.own import crate as own_crate
from parity.own import fixture as own_fixture
from parity.own import torch_model
from parity.plan import own as plan_own
from parity.plan.keys import RunKey
from parity.plan.plan import Plan
from parity.plan.runspec import runner_spec
from parity.trace import fixtures
from parity.trace.reader import TraceReader
from parity.train import own_check
from parity.train import torch as torch_runner

from conftest import REPO, load_config

TEMPLATE = "examples/template/model.py:make_model"
ADAMW = {"name": "adamw", "lr": 1e-2, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.01}


def own_config(tmp_path: Path, torch_spec: dict, data: dict | None = None, **exp) -> dict:
    """The default config with one own-model experiment ``mine``, run alone."""
    cfg = load_config()
    cfg["only"] = ["mine"]
    cfg["experiments"]["mine"] = {
        "model": {"family": "own", "torch": torch_spec},
        "loss": "mse",
        "data": data
        or {
            "seed": 3,
            "batches": 2,
            "batch_size": 3,
            "inputs": {"shape": [4]},
            "targets": {"shape": [2]},
        },
        "optimizer": ADAMW,
        "steps": 3,
        "runs": {"torch": {}, "torch_foreach": {"optimizer_path": "foreach"}},
        "comparisons": {"main": {"reference": "torch", "candidate": "torch_foreach"}},
        **exp,
    }
    return cfg


def write_factory(folder: Path, body: str, name: str = "model.py") -> str:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text("import torch\nfrom torch import nn\n\n" + body)
    return f"{folder / name}:make"


@pytest.fixture(scope="module")
def template_plan(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("own")
    spec = {"factory": str(REPO / TEMPLATE).replace(":make_model", "") + ":make_model"}
    return Plan(own_config(tmp, spec), workdir=str(tmp)), tmp


def test_the_model_card_lists_the_modules_own_parameters_in_state_dict_order(template_plan):
    plan, _ = template_plan
    m = plan.experiments["mine"]["model"]
    assert model_params(m) == [
        ("0.weight", (8, 4)),
        ("0.bias", (8,)),
        ("2.weight", (2, 8)),
        ("2.bias", (2,)),
    ]
    assert m["tied"] == {} and m["rust_config"] == {}
    assert m["io"] == {
        "input": {"kind": "float", "shape": [4]},
        "target": {"kind": "float", "shape": [2]},
    }


def test_the_model_card_is_kept_and_made_again_when_the_factory_changes(tmp_path):
    src = "def make(n=3):\n    return nn.Linear(n, 2)\n"
    ref = write_factory(tmp_path / "m", src)
    spec = {"factory": ref}
    card = plan_own.model_card("x", "mine", spec, tmp_path)
    assert card["params"] == [["weight", [2, 3]], ["bias", [2]]]
    kept = json.loads((tmp_path / plan_own.CARD.format(experiment="mine")).read_text())
    assert kept["key"] == plan_own.card_key(spec, tmp_path)
    # an edit to the factory's folder gives another key, so the card is made again
    (tmp_path / "m" / "model.py").write_text(
        "import torch\nfrom torch import nn\n\ndef make(n=3):\n    return nn.Linear(n, 5)\n"
    )
    assert plan_own.card_key(spec, tmp_path) != kept["key"]
    assert plan_own.model_card("x", "mine", spec, tmp_path)["params"][0] == ["weight", [5, 3]]


def test_tied_weights_are_recorded_once_under_their_first_name():
    class Tied(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(5, 3)
            self.head = torch.nn.Linear(3, 5, bias=False)
            self.head.weight = self.emb.weight

    params, tied = torch_model.unique_parameters(Tied())
    assert [n for n, _ in params] == ["emb.weight"]
    assert tied == {"head.weight": "emb.weight"}


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("def make():\n    return 3\n", "returned a int, not a torch.nn.Module"),
        ("def make():\n    raise ValueError('no')\n", "raised ValueError: no"),
        ("import no_such_module_here\ndef make():\n    pass\n", "does not import"),
        ("def other():\n    pass\n", "has no function 'make'"),
    ],
)
def test_a_factory_that_gives_no_module_is_refused_by_its_key(tmp_path, body, message):
    ref = write_factory(tmp_path / "m", body)
    with pytest.raises(ConfigError) as e:
        Plan(own_config(tmp_path, {"factory": ref}), workdir=str(tmp_path))
    assert "experiments.mine.model.torch" in str(e.value) and message in str(e.value)


def test_a_missing_factory_file_is_refused(tmp_path):
    with pytest.raises(
        ConfigError, match=r"experiments.mine.model.torch.factory: nowhere.py .*: does not exist"
    ):
        Plan(own_config(tmp_path, {"factory": "nowhere.py:make"}), workdir=str(tmp_path))


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"transformers": "LlamaForCausalLMX"}, "has no model class 'LlamaForCausalLMX'"),
        ({"transformers": "LlamaForCausalLM", "config": {"hidden_act": "nope"}}, "cannot"),
        # transformers' message spans lines; the key and the class stay in the one reported
        (
            {
                "transformers": "LlamaForCausalLM",
                "config": {"hidden_size": 30, "num_attention_heads": 4, "vocab_size": 32},
            },
            "model.torch.config: LlamaConfig refuses it: ",
        ),
    ],
)
def test_a_transformers_class_or_config_that_does_not_exist_is_refused(tmp_path, spec, message):
    with pytest.raises(ConfigError) as e:
        Plan(own_config(tmp_path, spec), workdir=str(tmp_path))
    assert "experiments.mine.model.torch" in str(e.value) and message in str(e.value)


def test_a_dtype_fixed_in_the_models_code_is_refused_before_any_job(tmp_path):
    """The fixture is drawn in float64: a parameter made float32 whatever the default dtype
    cannot be drawn, so the plan refuses it (it used to stop the fixture job)."""
    ref = write_factory(
        tmp_path,
        "class M(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.w = nn.Parameter(torch.zeros(2, 4, dtype=torch.float32))\n"
        "    def forward(self, x):\n"
        "        return x @ self.w.t()\n\n"
        "def make():\n"
        "    return M()\n",
    )
    with pytest.raises(
        ConfigError, match=r"model\.torch: parameters \['w'\] are not torch.float64"
    ):
        Plan(own_config(tmp_path, {"factory": ref}), workdir=str(tmp_path))


def test_a_model_with_active_dropout_is_refused_naming_the_module(tmp_path):
    src = (
        "def make():\n    return nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.1), nn.Linear(8, 2))\n"
    )
    ref = write_factory(tmp_path / "m", src)
    with pytest.raises(ConfigError, match=r"random in training mode, .*: 1 \(Dropout p=0.1\)"):
        Plan(own_config(tmp_path, {"factory": ref}), workdir=str(tmp_path))


def test_randomness_the_module_scan_cannot_see_is_caught_by_running_twice():
    model = torch.nn.Linear(3, 3)

    class Noisy(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = model

        def forward(self, x):
            return self.lin(x) + torch.randn_like(x)

    with pytest.raises(torch_model.OwnModelError, match="draws random numbers"):
        torch_model.check_deterministic(Noisy(), {"factory": "x:y"}, torch.ones(2, 3))


def test_data_and_loss_must_fit_the_model(tmp_path):
    ref = str(REPO / TEMPLATE)
    cfg = own_config(tmp_path, {"factory": ref})
    cfg["experiments"]["mine"]["loss"] = "cross_entropy"
    with pytest.raises(ConfigError, match=r"float targets .* need loss mse"):
        Plan(cfg, workdir=str(tmp_path))
    cfg = own_config(tmp_path, {"factory": ref}, data={"seed": 1, "batches": 1, "batch_size": 2})
    with pytest.raises(ConfigError, match="data: an own model's data is one of"):
        Plan(cfg, workdir=str(tmp_path))


def test_a_rust_side_without_its_crate_and_a_missing_buffer_are_refused(tmp_path):
    cfg = own_config(tmp_path, {"factory": str(REPO / TEMPLATE)})
    exp = cfg["experiments"]["mine"]
    exp["model"]["candle"] = {"crate": "no/such/crate", "model": "Port"}
    exp["model"]["buffers"] = ["no_buffer"]
    with pytest.raises(ConfigError) as e:
        Plan(cfg, workdir=str(tmp_path))
    text = str(e.value)
    assert "model.candle.crate: no/such/crate (" in text
    assert "/no/such/crate): does not exist" in text
    assert "model.buffers: the model has no buffer 'no_buffer'" in text
    cfg = own_config(tmp_path, {"factory": str(REPO / TEMPLATE)})
    cfg["experiments"]["mine"]["runs"]["burn"] = {}
    with pytest.raises(ConfigError, match="the model has no burn port"):
        Plan(cfg, workdir=str(tmp_path))


def test_a_burn_port_is_planned_like_a_candle_port(tmp_path):
    cfg = own_config(tmp_path, {"factory": str(REPO / TEMPLATE)})
    exp = cfg["experiments"]["mine"]
    exp["model"]["burn"] = {"crate": str(tmp_path), "model": "Port"}
    exp["runs"]["burn"] = {}
    with pytest.raises(ConfigError) as e:
        Plan(cfg, workdir=str(tmp_path))
    assert f"model.burn.crate: {tmp_path.resolve()} has no Cargo.toml" in str(e.value)
    (tmp_path / "Cargo.toml").write_text('[package]\nname = "p"\n')
    exp["model"]["rename"] = {"burn": {"first.weight": "0.weight"}}
    plan = Plan(cfg, workdir=str(tmp_path))
    model = plan.experiments["mine"]["model"]
    assert model["burn"] == {"crate": str(tmp_path.resolve()), "model": "Port"}
    assert model["rename"]["burn"] == {"first.weight": "0.weight"}


def test_only_selects_the_experiments_and_refuses_an_unknown_name(template_plan):
    plan, tmp = template_plan
    assert list(plan.experiments) == ["mine"]
    cfg = copy.deepcopy(plan.config)
    cfg["only"] = ["mine", "nope"]
    with pytest.raises(ConfigError, match=r"only\[1\]: 'nope' is not an experiment"):
        Plan(cfg, workdir=str(tmp))


# ----- fixture, training, replay -----------------------------------------------------


@pytest.fixture(scope="module")
def template_fixture(template_plan):
    plan, tmp = template_plan
    path = tmp / "fixture.safetensors"
    tensors = own_fixture.write(str(path), plan.fixture_settings("mine"))
    return plan, tmp, path, tensors


def test_the_fixture_is_the_modules_own_initialisation_in_float64_rounded_once(template_fixture):
    _plan, _, _, tensors = template_fixture
    torch.manual_seed(3)
    with torch_model.default_dtype(torch.float64):
        from importlib import util

        spec = util.spec_from_file_location("tmpl", REPO / "examples/template/model.py")
        mod = util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        want = mod.make_model()
    for n, p in want.named_parameters():
        assert tensors[n].dtype == np.float32
        np.testing.assert_array_equal(tensors[n], p.detach().numpy().astype(np.float32))
    assert tensors["x"].shape == (2, 3, 4) and tensors["y"].shape == (2, 3, 2)


def test_the_same_settings_give_the_same_fixture_bytes(template_fixture, tmp_path):
    plan, _, path, _ = template_fixture
    again = tmp_path / "again.safetensors"
    own_fixture.write(str(again), plan.fixture_settings("mine"))
    assert again.read_bytes() == path.read_bytes()


@pytest.mark.parametrize(
    ("data", "message"),
    [
        # F.mse_loss would broadcast [3, 1] against the output [3, 2] with only a warning
        (
            {"targets": {"shape": [1]}},
            (
                r"experiments\.mine\.data\.targets\.shape: the PyTorch model's output for a "
                r"batch of shape \[3, 4\] has shape \[3, 2\]; the loss \(mse, targets of "
                r"shape \[3, 1\]\) needs \[3, 1\] \(targets of shape \[2\] would fit"
            ),
        ),
        ({"targets": {"shape": [3]}}, r"data\.targets\.shape: .* has shape \[3, 2\]"),
        (
            {"inputs": {"shape": [5]}},
            (
                r"experiments\.mine\.data\.inputs\.shape: the PyTorch model's forward pass "
                r"fails on a batch of shape \[3, 5\]: RuntimeError: .*mat1 and mat2"
            ),
        ),
    ],
)
def test_data_that_does_not_fit_the_model_is_refused_by_the_fixture(tmp_path, data, message):
    """Before any training job: the fixture job runs the model on its first batch."""
    cfg = own_config(tmp_path, {"factory": str(REPO / TEMPLATE)})
    exp = cfg["experiments"]["mine"]
    exp["data"] = {**exp["data"], **data}
    plan = Plan(cfg, workdir=str(tmp_path))
    path = tmp_path / "fixture.safetensors"
    with pytest.raises(own_fixture.OwnFixtureError, match=message):
        own_fixture.write(str(path), plan.fixture_settings("mine"))
    assert not path.exists()


def test_class_labels_must_fit_the_models_output(tmp_path):
    cfg = own_config(tmp_path, {"factory": str(REPO / TEMPLATE)}, loss="cross_entropy")
    exp = cfg["experiments"]["mine"]
    exp["data"] = {**exp["data"], "targets": {"classes": 5}}
    plan = Plan(cfg, workdir=str(tmp_path))
    with pytest.raises(
        own_fixture.OwnFixtureError, match=r"data\.targets\.classes: .*needs \[3, 5\]"
    ):
        own_fixture.write(str(tmp_path / "f.safetensors"), plan.fixture_settings("mine"))
    exp["data"]["targets"]["classes"] = 2
    own_fixture.write(
        str(tmp_path / "f.safetensors"), Plan(cfg, workdir=str(tmp_path)).fixture_settings("mine")
    )


def test_a_transposed_parameter_is_written_and_read_back_as_the_module_holds_it(tmp_path):
    """A parameter made by ``.t()`` is column-major in memory: its fixture still holds its
    logical values, and the checked load accepts it (it was once always refused as corrupt)."""
    ref = write_factory(
        tmp_path,
        "class M(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.w = nn.Parameter(torch.randn(4, 2).t())\n"
        "    def forward(self, x):\n"
        "        return x @ self.w.t()\n\n"
        "def make():\n"
        "    return M()\n",
    )
    plan = Plan(own_config(tmp_path, {"factory": ref}), workdir=str(tmp_path))
    path = tmp_path / "fixture.safetensors"
    drawn = own_fixture.write(str(path), plan.fixture_settings("mine"))
    assert not drawn["w"].flags.c_contiguous  # the case this test is about
    back = fixtures.load(path)
    np.testing.assert_array_equal(back["w"], drawn["w"])
    assert back["w"].shape == (2, 4)


def test_the_same_module_trains_alike_on_two_optimizer_paths_and_records_every_step(
    template_fixture,
):
    plan, tmp, path, _ = template_fixture
    log = logging.getLogger("test")
    traces = {}
    for run in ("torch", "torch_foreach"):
        out = tmp / f"{run}.parquet"
        torch_runner.train(
            RunKey("mine", run, "f64", "cpu"),
            plan.run_settings("mine", run),
            str(path),
            str(out),
            1,
            log,
            torch_model.OwnNet,
        )
        traces[run] = TraceReader(str(out))
    a, b = (list(traces[r].iter_steps()) for r in ("torch", "torch_foreach"))
    assert [s.step for s in a] == [0, 1, 2, 3]
    assert not np.array_equal(a[0].flat, a[3].flat)  # it trained
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x.flat, y.flat)  # foreach equals single_tensor


def test_the_replay_names_every_submodule_and_gives_the_walk_its_dataflow(template_fixture):
    plan, _, path, tensors = template_fixture
    m = plan.experiments["mine"]["model"]
    names = [n for n, _ in model_params(m)]
    state = {n: tensors[n] for n in names}
    out, header = torch_runner.replay(
        plan.run_settings("mine", "torch"),
        str(path),
        state,
        0,
        1,
        "cpu",
        "f32",
        1,
        torch_model.OwnNet,
    )
    flow = json.loads(header["dataflow"])
    assert [d["name"] for d in flow] == ["0.out", "1.out", "2.out", "output"]
    assert [d["inputs"] for d in flow] == [[], ["0.out"], ["1.out"], ["2.out"]]
    assert {"0.out", "grad:1.out", "grad:0.weight", "after:2.bias", "loss"} <= set(out)
    qs = walk.own_quantities(names, flow)
    order = [q.name for q in qs]
    # the backward pass reaches a layer's parameters right after its output's gradient
    assert order.index("grad:2.weight") == order.index("grad:2.out") + 1
    assert order[-4:] == [f"update:{n}" for n in names]
    by = {q.name: q for q in qs}
    assert by["grad:1.out"].inputs == ("grad:2.out", "1.out")
    assert by["grad:2.weight"].inputs == ("grad:2.out", "1.out")


def test_the_walk_names_the_module_whose_backward_differs(template_fixture):
    """A culprit inside the model: the candidate's activation backward is wrong (its
    gradient is scaled), everything before it agrees."""
    plan, _, path, tensors = template_fixture
    m = plan.experiments["mine"]["model"]
    names = [n for n, _ in model_params(m)]
    state = {n: tensors[n] for n in names}
    settings = plan.run_settings("mine", "torch")
    rec = {}
    for role, dt in (("ref32", "f32"), ("ref64", "f64")):
        out, header = torch_runner.replay(
            settings, str(path), state, 0, 1, "cpu", dt, 1, torch_model.OwnNet
        )
        rec[role] = walk.derive_updates(out, {n: state[n].reshape(-1) for n in names}, names)
    flow = json.loads(header["dataflow"])
    bad = {k: dict(v) for k, v in (("cand32", rec["ref32"]), ("cand64", rec["ref64"]))}
    for r in bad.values():
        for q in ("grad:0.out", "grad:0.weight", "grad:0.bias", "update:0.weight", "update:0.bias"):
            r[q] = r[q] * 1.01
    w = walk.walk(m, 3, {**rec, **bad}, {}, walk.Settings(), flow)
    assert w.culprit == "grad:0.out" and w.culprit_phase == "backward"
    # the template is an nn.Sequential: its paths are numbers, the note says what they are
    assert replay.culprit_module(w.culprit, flow) == "`0` is a `Linear`"
    assert replay.culprit_module("update:2.bias", flow) == "`2` is a `Linear`"
    assert replay.culprit_module("1.out", flow) == "`1` is a `Tanh`"
    assert replay.culprit_module("loss", flow) is None
    assert replay.culprit_module("grad:0.out", None) is None


# ----- the Rust side's contract ------------------------------------------------------


def test_the_run_spec_hands_the_port_the_model_config_io_and_rename(tmp_path):
    spec = {"factory": str(REPO / TEMPLATE)}
    cfg = own_config(tmp_path, spec)
    crate = tmp_path / "port"
    crate.mkdir()
    (crate / "Cargo.toml").write_text('[package]\nname = "my-port"\nversion = "0.1.0"\n')
    cfg["experiments"]["mine"]["model"]["candle"] = {"crate": str(crate), "model": "Port"}
    cfg["experiments"]["mine"]["model"]["rename"] = {"candle": {"fc0.weight": "0.weight"}}
    cfg["experiments"]["mine"]["model"]["torch"]["kwargs"] = {"hidden": 8}
    cfg["experiments"]["mine"]["runs"]["candle"] = {}
    plan = Plan(cfg, workdir=str(tmp_path))
    s = plan.run_settings("mine", "candle")
    spec_json = runner_spec(RunKey("mine", "candle", "f32", "cpu"), s, "fx.safetensors")
    assert spec_json["model"] == {
        "family": "own",
        "config": {"hidden": 8},
        "input": "float",
        "target": "float",
        "tied": {},
        "buffers": [],
        "rename": {"fc0.weight": "0.weight"},
    }
    assert [p["name"] for p in spec_json["params"]] == ["0.weight", "0.bias", "2.weight", "2.bias"]
    assert plan.binary(RunKey("mine", "candle", "f32", "cpu")) == "results/bin/own/mine-candle-cpu"


def _inspection(**over):
    out = {
        "params": [["0.weight", [8, 4]], ["0.bias", [8]], ["2.weight", [2, 8]], ["2.bias", [2]]],
        "missing": [],
        "shape_mismatch": [],
        "output_shape": [3, 2],
        "no_grad": [],
        "taps": [],
        "build_error": None,
        "forward_error": None,
        "backward_error": None,
    }
    out.update(over)
    return out


def test_a_port_with_the_same_parameters_and_output_passes_the_check(template_plan):
    plan, _ = template_plan
    m = plan.experiments["mine"]["model"]
    assert own_check.judge(_inspection(), m, 3) == []
    # parameters without a gradient are a finding about the port, not a setup mistake
    assert own_check.judge(_inspection(no_grad=["0.weight"]), m, 3) == []


@pytest.mark.parametrize(
    ("over", "expect"),
    [
        ({"params": [["0.weight", [8, 4]], ["0.bias", [8]], ["2.bias", [2]]]}, "never asks for 1"),
        ({"missing": ["fc.weight"]}, "asks for 'fc.weight', which the PyTorch model does not have"),
        ({"shape_mismatch": [["0.weight", [8, 4], [4, 8]]]}, "shape [4, 8], PyTorch's is [8, 4]"),
        ({"output_shape": [3, 4]}, "output has shape [3, 4]; the loss needs [3, 2]"),
        ({"forward_error": "matmul shape"}, "forward pass fails: matmul shape"),
        ({"build_error": "no such var"}, "cannot be built from the fixture: no such var"),
    ],
)
def test_a_port_that_differs_is_refused_with_every_difference(template_plan, over, expect):
    plan, _ = template_plan
    problems = own_check.judge(_inspection(**over), plan.experiments["mine"]["model"], 3)
    assert any(expect in p for p in problems), problems


def test_a_build_that_only_asked_wrongly_is_checked_to_its_end(template_plan):
    """The inspection's store serves zeros for a wrong shape or a missing name, so such a
    build ran to its end: every difference is listed, not only the build error."""
    plan, _ = template_plan
    model = plan.experiments["mine"]["model"]
    asked = '"0.weight" asked for with shape [4, 8], the fixture\'s is [8, 4]'
    inspection = _inspection(
        params=[["0.weight", [4, 8]]],
        shape_mismatch=[["0.weight", [8, 4], [4, 8]]],
        build_error=asked,
    )
    assert own_check.judge(inspection, model, 3) == [
        "0.weight: the port asks for shape [4, 8], PyTorch's is [8, 4]",
        (
            "the port never asks for 3 of PyTorch's parameters: 0.bias, 2.weight, 2.bias "
            "(rename them in model.rename if the port names them differently)"
        ),
    ]
    # a build that failed after asking: only its error, what it would have asked is unknown
    inspection["build_error"] = asked + "; then the build failed: shape mismatch in matmul"
    (only,) = own_check.judge(inspection, model, 3)
    assert only.startswith("the port cannot be built from the fixture: ")


def test_a_missing_buffer_the_model_has_points_at_model_buffers(template_plan):
    plan, _ = template_plan
    model = {**plan.experiments["mine"]["model"], "other_buffers": ["1.running_mean"]}
    inspection = _inspection(
        missing=["norm.running_mean"],
        build_error='the fixture holds no tensor "norm.running_mean"',
    )
    problems = own_check.judge(inspection, model, 3)
    assert problems[0] == (
        "the port asks for 'norm.running_mean', which the PyTorch model does not have"
    )
    assert problems[1].startswith(
        "the PyTorch model has buffers it does not hand to the port: 1.running_mean; name "
        "those the port needs in model.buffers"
    )


def test_a_frozen_parameter_is_on_the_card_and_the_port_must_not_train_it(tmp_path):
    """A parameter PyTorch does not train (requires_grad=False, as in fine-tuning) is
    listed on the model card; a port that gives it a gradient is refused before training,
    one that serves it without a gradient passes."""
    ref = write_factory(
        tmp_path,
        "def make():\n"
        "    m = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))\n"
        "    m[0].weight.requires_grad_(False)\n"
        "    return m\n",
    )
    plan = Plan(own_config(tmp_path, {"factory": ref}), workdir=str(tmp_path))
    model = plan.experiments["mine"]["model"]
    assert model["frozen"] == ["0.weight"]
    problems = own_check.judge(_inspection(), model, 3)
    assert problems == [
        (
            "the port trains parameters PyTorch's model freezes (requires_grad=False): "
            "0.weight; serve each without a gradient, as docs/own-model.md shows (candle: "
            "vb.get(…)?.detach(); burn: Param::set_require_grad(false) in init)"
        )
    ]
    assert own_check.judge(_inspection(no_grad=["0.weight"]), model, 3) == []
    # no backward pass ran: nothing is known of the gradients, the error says what failed
    problems = own_check.judge(_inspection(backward_error="boom"), model, 3)
    assert not any("freezes" in p for p in problems)


def test_a_model_card_of_an_older_format_is_made_again(tmp_path):
    """The card's format is part of its key: a kept card without ``frozen`` is not read."""
    spec = {"factory": str(REPO / TEMPLATE)}
    key = plan_own.card_key(spec, tmp_path)
    old = plan_own.CARD_FORMAT
    try:
        plan_own.CARD_FORMAT = old - 1
        assert plan_own.card_key(spec, tmp_path) != key
    finally:
        plan_own.CARD_FORMAT = old


def test_a_ports_build_gets_only_the_profile_tables_of_its_frameworks_packages():
    """cargo warns of a [profile.release.package.NAME] table that matches nothing it builds:
    a candle port's crate leaves burn's tables out, a burn port's candle's tokenizer."""
    workspace = (REPO / "rust" / "Cargo.toml").read_text()
    tables = {}
    for framework in ("candle", "burn"):
        packages = own_crate.runner_packages(REPO / "rust" / "Cargo.lock", framework)
        profile = own_crate.release_profile(workspace, packages)
        tables[framework] = set(re.findall(r"^\[profile\.release\.package\.(\S+)\]", profile, re.M))
    assert {"burn-ndarray", "burn-dispatch"} <= tables["burn"]
    assert not tables["candle"] & {"burn-ndarray", "burn-dispatch"}
    assert {"tokenizers", "esaxx-rs", "typed-path"} <= tables["candle"]
    assert not tables["burn"] & {"tokenizers", "esaxx-rs", "typed-path"}
    assert {"regex-automata", "clap_builder"} <= tables["candle"] & tables["burn"]


def test_the_runner_crate_links_the_port_and_the_runner_library_by_path(tmp_path):
    crate = tmp_path / "port"
    crate.mkdir()
    (crate / "Cargo.toml").write_text('[package]\nname = "my-port"\nversion = "0.1.0"\n')
    profile = own_crate.release_profile((REPO / "rust" / "Cargo.toml").read_text())
    assert profile.startswith("[profile.release]")
    text = own_crate.manifest("mine", "candle", REPO / "rust", crate, [], profile)
    assert f'candle-parity = {{ path = "{REPO / "rust" / "candle-parity"}" }}' in text
    assert f'port = {{ package = "my-port", path = "{crate}" }}' in text
    assert "[workspace]" in text and profile in text
    # burn's backend is a feature of burn-parity, the primary burn entry's, never beside
    # the default one.
    text = own_crate.manifest("mine", "burn", REPO / "rust", crate, ["flex"], profile)
    lib = REPO / "rust" / "burn-parity"
    assert (
        f'burn-parity = {{ path = "{lib}", default-features = false, features = ["flex"] }}' in text
    )
    main = own_crate.main_rs("candle", "models::Port", "abcd")
    assert 'candle_parity::main::<port::models::Port>("abcd")' in main
    with pytest.raises(ValueError, match="not a Rust type path"):
        own_crate.main_rs("candle", "Port; drop", "abcd")


def test_a_run_that_never_ran_names_the_failed_job_before_it(tmp_path, monkeypatch):
    """The partial summary points at the log of the job that failed before a run (the
    fixture, the port's build or its check), not at a training log that was never written."""
    from parity.core import paths
    from parity.report import partial

    monkeypatch.chdir(tmp_path)
    key = RunKey("mine", "candle", "f32", "cpu")
    fields = {"experiment": "mine", "framework": "candle", "device": "cpu"}
    assert partial._upstream_failure(key) is None  # nothing ran at all
    check_log = Path(paths.OWN_CHECK_LOG.format(**fields))
    check_log.parent.mkdir(parents=True)
    check_log.write_text("PortMismatch: …\n")
    assert partial._upstream_failure(key) == (
        f"run candle f32 cpu never ran: the check of its port (own_check) failed; see {check_log}"
    )
    fixture_log = Path(paths.FIXTURE_LOG.format(**fields))
    fixture_log.parent.mkdir(parents=True)
    fixture_log.write_text("OwnFixtureError: …\n")
    # the first failed job in the order they run
    assert "its fixture job failed; see results/logs/fixture/mine.log" in partial._upstream_failure(
        key
    )
    assert "fixture job" in partial._upstream_failure(RunKey("mine", "torch", "f32", "cpu"))
    fixture = Path(paths.FIXTURE.format(**fields))
    fixture.parent.mkdir(parents=True)
    fixture.write_bytes(b"made")
    assert partial._upstream_failure(RunKey("mine", "torch", "f32", "cpu")) is None
