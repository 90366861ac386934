"""Fixtures: drawn in float64, rounded to float32 once, same seed → same bytes."""

import re

import numpy as np
import pytest
from safetensors.numpy import load_file

from parity.plan.plan import Plan
from parity.trace import fixtures

from conftest import load_config

A3 = {
    "model": {"family": "mlp", "sizes": [8, 16, 4], "activation": "relu"},
    "loss": "mse",
    "data": {"seed": 7, "batches": 1, "batch_size": 32},
}
CNN = {
    "model": {
        "family": "cnn1d",
        "in_channels": 1,
        "channels": 4,
        "kernel": 5,
        "length": 16,
        "classes": 3,
        "activation": "relu",
    },
    "loss": "cross_entropy",
    "data": {"seed": 7, "batches": 6, "batch_size": 16},
}


def test_same_seed_gives_the_same_bytes(tmp_path):
    fixtures.write(tmp_path / "a.safetensors", A3)
    fixtures.write(tmp_path / "b.safetensors", A3)
    assert (tmp_path / "a.safetensors").read_bytes() == (tmp_path / "b.safetensors").read_bytes()


def test_another_seed_gives_other_values():
    other = {**A3, "data": {**A3["data"], "seed": 8}}
    a, b = fixtures.draw(A3), fixtures.draw(other)
    assert not np.array_equal(a["fc1.weight"], b["fc1.weight"])


def test_values_are_float64_draws_rounded_once():
    t = fixtures.draw(A3)
    rng = np.random.default_rng(7)
    bound = 1 / np.sqrt(8)
    want = rng.uniform(-bound, bound, size=(16, 8)).astype(np.float32)
    assert t["fc1.weight"].dtype == np.float32
    assert np.array_equal(t["fc1.weight"], want)
    assert np.abs(t["fc1.weight"]).max() <= bound


def test_state_dict_names_and_shapes():
    t = fixtures.draw(A3)
    assert {k: v.shape for k, v in t.items()} == {
        "fc1.weight": (16, 8),
        "fc1.bias": (16,),
        "fc2.weight": (4, 16),
        "fc2.bias": (4,),
        "x": (1, 32, 8),
        "y": (1, 32, 4),
    }
    assert sum(t[k].size for k in t if k not in ("x", "y")) == 212


def test_cross_entropy_fixture_has_int64_labels_in_range():
    t = fixtures.draw(CNN)
    assert t["x"].shape == (6, 16, 1, 16)
    assert t["y"].dtype == np.int64 and t["y"].shape == (6, 16)
    assert t["y"].min() >= 0 and t["y"].max() < 3
    assert t["fc.weight"].shape == (3, 48)


def test_default_config_fixture_round_trips(tmp_path):
    plan = Plan(load_config())
    settings = plan.fixture_settings("a3_adamw")
    fixtures.write(tmp_path / "f.safetensors", settings)
    back = load_file(tmp_path / "f.safetensors")
    assert np.array_equal(back["x"], fixtures.draw(settings)["x"])


@pytest.mark.parametrize(
    "make",
    [
        lambda a: np.asfortranarray(a),  # a transposed PyTorch parameter's .numpy()
        lambda a: a.T.copy().T,  # the same, as a view
        lambda a: np.repeat(a, 2, axis=1)[:, ::2],  # strided, neither C nor F ordered
    ],
)
def test_an_array_in_any_memory_order_is_written_in_its_logical_order(tmp_path, make):
    """safetensors' numpy writer writes memory as it lies; the fixture writer must not."""
    logical = np.arange(12, dtype=np.float32).reshape(3, 4)
    given = make(logical)
    assert np.array_equal(given, logical) and not given.flags.c_contiguous
    path = tmp_path / "f.safetensors"
    fixtures.save(path, {"w": given}, {"any": "settings"})
    assert np.array_equal(load_file(path)["w"], logical)
    assert np.array_equal(fixtures.load(path)["w"], logical)  # its recorded sha256 holds


def _every_experiment():
    plan = Plan(load_config())
    return [(e, plan.run_settings(e, next(iter(x["runs"])))) for e, x in plan.experiments.items()]


def test_every_experiments_fixture_holds_what_its_runs_expect():
    for e, settings in _every_experiment():
        fixtures.check(e, fixtures.draw(settings), settings)


def _altered(change):
    _, settings = next(x for x in _every_experiment() if x[0] == "a3_sgd")
    tensors = fixtures.draw(settings)
    change(tensors)
    return tensors, settings


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda t: t.update(x=t["x"].astype(np.float64)), "x is float64, not float32"),
        (lambda t: t.pop("fc1.bias"), "no tensor 'fc1.bias'"),
        (
            lambda t: t.update({"fc1.weight": t["fc1.weight"].T.copy()}),
            "shape [8, 16], not [16, 8]",
        ),
        (lambda t: t.update(y=t["y"][..., :2].copy()), "y has shape [1, 32, 2], not [1, 32, 4]"),
    ],
    ids=["float64 input", "missing parameter", "transposed weight", "targets"],
)
def test_a_fixture_that_does_not_fit_the_run_is_refused_naming_the_tensor(change, message):
    tensors, settings = _altered(change)
    with pytest.raises(fixtures.FixtureError, match=re.escape(message)):
        fixtures.check("fx.safetensors", tensors, settings)


def test_the_pytorch_runner_refuses_a_fixture_the_rust_runners_would(tmp_path):
    """Both sides check a fixture alike: the PyTorch runner names the tensor instead of
    casting a float64 input silently."""
    import logging

    from parity.plan.keys import RunKey
    from parity.train import torch as torch_runner

    tensors, settings = _altered(lambda t: t.update(x=t["x"].astype(np.float64)))
    path = tmp_path / "fx.safetensors"
    fixtures.save(path, tensors, {"model": settings["model"]})
    with pytest.raises(fixtures.FixtureError, match="x is float64, not float32"):
        torch_runner.train(
            RunKey("a3_sgd", "torch", "f32", "cpu"),
            settings,
            str(path),
            str(tmp_path / "t"),
            1,
            logging.getLogger("t"),
        )
    assert not (tmp_path / "t").exists()
