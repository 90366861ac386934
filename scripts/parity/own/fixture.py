"""The fixture of an own model: the PyTorch model's own initialisation under the
experiment's seed, made in float64 and rounded to float32 once, and its data.

* parameters: ``torch.manual_seed(seed)``, the model built with float64 as the default
  dtype (so its initialisers draw in float64), each parameter once in state_dict order
  (a tied tensor under the name it is recorded under), rounded to float32;
* buffers named in ``model.buffers``: the float64 model's values rounded to float32 (handed
  to the Rust side, never trained or compared);
* data drawn by numpy's PCG64 from the same seed, as the built-in families draw theirs
  (:mod:`parity.trace.fixtures`): token sequences of ``seq_len + 1`` ids uniform in
  ``[0, vocab)`` split into ``x`` and the next tokens ``y`` (int64, ``[batches, batch_size,
  seq_len]``); or float inputs N(0, 1) ``[batches, batch_size, *shape]`` with targets N(0, 1)
  (MSE) or class labels (int64 ``[batches, batch_size]``); or the user's own file's ``x``
  and ``y``, checked for their dimensions and dtypes.

The fixture is refused when the model built here does not have the parameters its model
card lists (the plan was made from a model whose code has changed since: rerun), and when
the data does not fit the model (:func:`check_fit`: its forward pass on the first batch
fails, or gives an output of another shape than the loss needs), so no training job runs on
data that PyTorch would broadcast or refuse.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from safetensors.numpy import load_file

from parity.core import usercode
from parity.own import torch_model
from parity.plan.own import expected_output
from parity.trace import fixtures


class OwnFixtureError(RuntimeError):
    """An own model's fixture that cannot be made; the message names what and why."""


def _data(model: Mapping[str, Any], data: Mapping[str, Any]) -> dict[str, np.ndarray]:
    io = model["io"]
    rng = np.random.default_rng(data["seed"])
    lead = (data["batches"], data["batch_size"])
    if io["input"]["kind"] == "tokens":
        t, vocab = io["input"]["shape"][0], io["input"]["vocab"]
        tokens = rng.integers(0, vocab, size=(*lead, t + 1), dtype=np.int64)
        return {
            "x": np.ascontiguousarray(tokens[..., :-1]),
            "y": np.ascontiguousarray(tokens[..., 1:]),
        }
    if io["input"]["kind"] == "file":
        return _data_file(io["file"], lead)
    out = {"x": rng.standard_normal(size=(*lead, *io["input"]["shape"])).astype(np.float32)}
    if io["target"]["kind"] == "classes":
        out["y"] = rng.integers(0, io["target"]["classes"], size=lead, dtype=np.int64)
    else:
        out["y"] = rng.standard_normal(size=(*lead, *io["target"]["shape"])).astype(np.float32)
    return out


def _data_file(path: str, lead: tuple[int, int]) -> dict[str, np.ndarray]:
    """The user's ``x`` and ``y``: each ``[batches, batch_size, …]``, float32, float64 (rounded
    to float32) or int64."""
    try:
        given = load_file(path)
    except Exception as e:  # safetensors raises its own error types
        raise OwnFixtureError(f"data.file {path}: not a readable safetensors file ({e})") from e
    out = {}
    for name in ("x", "y"):
        if name not in given:
            raise OwnFixtureError(
                f"data.file {path}: has no tensor {name!r} (it has {sorted(given)})"
            )
        a = given[name]
        if tuple(a.shape[:2]) != lead:
            raise OwnFixtureError(
                f"data.file {path}: {name} has shape {list(a.shape)}; its first two dimensions "
                f"must be data.batches and data.batch_size {list(lead)}"
            )
        if a.dtype == np.float64:
            a = a.astype(np.float32)
        if a.dtype not in (np.float32, np.int64):
            raise OwnFixtureError(
                f"data.file {path}: {name} is {a.dtype}; give float32, float64 or int64"
            )
        out[name] = np.ascontiguousarray(a)
    return out


def draw(settings: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """The fixture's tensors for ``settings`` (``Plan.fixture_settings``: model, loss, data).
    Raises :class:`OwnFixtureError` or :class:`parity.own.torch_model.OwnModelError`."""
    model, data = settings["model"], settings["data"]
    torch.manual_seed(data["seed"])
    module = torch_model.build(model["torch"], torch.float64)
    params, tied = torch_model.unique_parameters(module)
    got = [[n, list(p.shape)] for n, p in params]
    want = [[n, list(s)] for n, s in model["params"]]
    if got != want or tied != model["tied"]:
        raise OwnFixtureError(
            "the model built now does not have the parameters its model card lists (its code "
            f"changed since the plan was made): delete results/own/*/card.json and rerun; "
            f"now {got[:3]}…, card {want[:3]}…"
        )
    out = {n: p.detach().numpy().astype(np.float32) for n, p in params}
    buffers = dict(module.named_buffers())
    for name in model.get("buffers") or {}:
        out[name] = buffers[name].detach().numpy().astype(np.float32)
    for name, a in _data(model, data).items():
        if name in out:
            raise OwnFixtureError(f"the model has a parameter or buffer named {name!r}")
        out[name] = a
    # Last: a training-mode forward pass may update buffers (BatchNorm's running
    # statistics), and those handed over were copied above.
    check_fit(module, model, settings["loss"], out["x"][0], out["y"][0])
    return out


def _data_key(model: Mapping[str, Any], part: str) -> str:
    """The config key that sets the ``part`` (``inputs`` or ``targets``) of the data."""
    where = f"experiments.{model['name']}.data"
    io = model["io"]
    if "file" in io:
        return f"{where}.file"
    if io["input"]["kind"] == "tokens":
        return f"{where}.tokens"
    if part == "targets" and io["target"]["kind"] == "classes":
        return f"{where}.targets.classes"
    return f"{where}.{part}.shape"


def check_fit(
    module: torch.nn.Module, model: Mapping[str, Any], loss: str, x: np.ndarray, y: np.ndarray
) -> None:
    """Refuse data that does not fit the PyTorch model: its forward pass on one batch ``x``
    (``[B, …]``, float inputs run in the module's float64, token ids as int64) must run and
    give the output shape the loss needs for targets ``y``
    (:func:`parity.plan.own.expected_output`; for class labels from a file, ``[B, C]`` with
    every label below C). ``F.mse_loss`` broadcasts a target of another shape with only a
    warning, so without this a PyTorch run would train on a loss the port's check then
    refuses. Raises :class:`OwnFixtureError` naming the config key to change."""
    batch = x.shape[0]
    xt = torch.from_numpy(np.ascontiguousarray(x))
    if xt.is_floating_point():
        xt = xt.to(torch.float64)
    usercode.progress(f"the forward pass on a batch of shape {list(xt.shape)}")
    try:
        with torch.no_grad():
            out = torch_model.forward(module, model["torch"], xt)
    except torch_model.OwnModelError:
        raise
    except Exception as e:  # the user's model raises what it raises
        reason = (str(e).strip().splitlines() or [""])[0]
        raise OwnFixtureError(
            f"{_data_key(model, 'inputs')}: the PyTorch model's forward pass fails on a batch "
            f"of shape {list(xt.shape)}: {type(e).__name__}: {reason}"
        ) from e
    got = list(out.shape)
    want = expected_output(model, batch)
    if want is None:  # class labels from a file: the class count is the model's
        largest = int(y.max()) if y.size else -1
        if len(got) == 2 and got[0] == batch and largest < got[1]:
            return
        need = f"[{batch}, C] with C above the largest label, {largest}"
    elif got == want:
        return
    else:
        need = str(want)
        if (
            model["io"]["target"]["kind"] == "float"
            and got[:1] == [batch]
            and "file" not in model["io"]
        ):
            need += f" (targets of shape {got[1:]} would fit the model)"
    raise OwnFixtureError(
        f"{_data_key(model, 'targets')}: the PyTorch model's output for a batch of shape "
        f"{list(xt.shape)} has shape {got}; the loss ({loss}, targets of shape "
        f"{list(y.shape)}) needs {need}"
    )


def write(path: str, settings: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Draw and write an own model's fixture atomically (``fixtures.save``); returns the
    tensors."""
    tensors = draw(settings)
    fixtures.save(path, tensors, settings)
    return tensors
