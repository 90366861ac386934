"""Fixtures: initial weights and data, drawn in float64 and rounded to float32 once.

Both frameworks read the same safetensors file. A float64 run widens these float32 values;
it never draws afresh. The same settings give the same bytes (the generator is numpy's
PCG64 ``default_rng(seed)``, and safetensors orders tensors deterministically).

Draw order, from one generator: each parameter in state_dict order, then ``x``, then ``y``.

* weights and biases: U(−1/√fan_in, 1/√fan_in), fan_in = product of the weight's
  trailing dimensions (PyTorch's default bound for Linear and Conv1d, ``torch.nn.init``);
* ``x``: N(0, 1), shape ``[batches, batch_size, *input]``;
* ``y``: N(0, 1) ``[batches, batch_size, outputs]`` for MSE; for cross-entropy, uniform
  class labels in ``[0, outputs)`` as int64 ``[batches, batch_size]``.

A transformer (:func:`draw_transformer`) draws its embeddings from N(0, 1) (PyTorch's
``nn.Embedding``), its Linear weights and biases as above, its layer norms' weights as 1
and biases as 0 (``nn.LayerNorm``); its data are token sequences of ``seq_len + 1`` ids
uniform in ``[0, vocab)``, int64, split into ``x`` (the first ``seq_len``) and ``y`` (the
next token of each position), both ``[batches, batch_size, seq_len]``.

The metadata records the sha256 of the tensors (:func:`tensors_sha256`), and every reader
loads a fixture through :func:`load`, which checks it: a fixture corrupted after it was
drawn is refused, never trained from.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Mapping
from typing import Any

import numpy as np
from safetensors import safe_open
from safetensors.numpy import load_file, save_file

from parity.core.config import canonical_hash
from parity.core.fileio import atomic_path
from parity.core.models import model_io, model_params

GENERATOR = "numpy.random.default_rng (PCG64)"


def draw(settings: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Draw a fixture from ``{"model", "loss", "data": {"seed", "batches", "batch_size"}}``.

    Returns float32 arrays for parameters and ``x``; ``y`` is float32 (MSE) or int64
    (cross-entropy). Raises ``KeyError`` for missing settings.
    """
    model, data = settings["model"], settings["data"]
    rng = np.random.default_rng(data["seed"])
    if model["family"] == "transformer":
        return draw_transformer(model, data, rng)
    params = model_params(model)
    fan_in: dict[str, int] = {}
    out: dict[str, np.ndarray] = {}
    for name, shape in params:
        layer, kind = name.rsplit(".", 1)
        if kind == "weight":
            fan_in[layer] = math.prod(shape[1:])
        bound = 1.0 / math.sqrt(fan_in[layer])
        out[name] = rng.uniform(-bound, bound, size=shape).astype(np.float32)
    in_shape, outputs = model_io(model)
    lead = (data["batches"], data["batch_size"])
    out["x"] = rng.standard_normal(size=(*lead, *in_shape)).astype(np.float32)
    if settings["loss"] == "mse":
        out["y"] = rng.standard_normal(size=(*lead, outputs)).astype(np.float32)
    else:
        out["y"] = rng.integers(0, outputs, size=lead, dtype=np.int64)
    return out


def draw_transformer(
    model: Mapping[str, Any], data: Mapping[str, Any], rng: np.random.Generator
) -> dict[str, np.ndarray]:
    """A transformer's fixture (see the module docs), in state_dict order from ``rng``."""
    out: dict[str, np.ndarray] = {}
    for name, shape in model_params(model):
        module, kind = name.rsplit(".", 1)
        if module.endswith("_emb"):
            values = rng.standard_normal(size=shape)
        elif module.split(".")[-1].startswith("ln"):
            values = np.ones(shape) if kind == "weight" else np.zeros(shape)
        else:  # a Linear: the bias takes the bound of its weight's fan-in
            bound = 1.0 / math.sqrt(
                model["d_model"] if not module.endswith("fc2") else 4 * model["d_model"]
            )
            values = rng.uniform(-bound, bound, size=shape)
        out[name] = values.astype(np.float32)
    lead = (data["batches"], data["batch_size"])
    tokens = rng.integers(0, model["vocab"], size=(*lead, model["seq_len"] + 1), dtype=np.int64)
    out["x"] = np.ascontiguousarray(tokens[..., :-1])
    out["y"] = np.ascontiguousarray(tokens[..., 1:])
    return out


class FixtureError(RuntimeError):
    """A fixture that cannot be trusted; the message names the file and says why."""


def tensors_sha256(tensors: Mapping[str, np.ndarray]) -> str:
    """sha256 over each tensor's name, dtype, shape and bytes, in name order."""
    h = hashlib.sha256()
    for name in sorted(tensors):
        a = np.ascontiguousarray(tensors[name])
        h.update(json.dumps([name, a.dtype.str, list(a.shape)]).encode())
        h.update(a.tobytes())
    return h.hexdigest()


def load(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """A fixture's tensors, checked against the sha256 its metadata records.

    Raises :class:`FixtureError` naming the file: not a readable safetensors file, no or
    malformed ``parity.fixture`` metadata, or tensors that differ from their checksum
    (corrupt: deleting it makes the workflow draw it again, byte for byte the same).
    """
    try:
        tensors = load_file(str(path))
        with safe_open(str(path), framework="numpy") as f:
            raw = (f.metadata() or {}).get("parity.fixture")
    except Exception as e:  # safetensors raises its own error types
        raise FixtureError(f"fixture {path}: not a readable safetensors file ({e})") from e
    try:
        meta = json.loads(raw)
        want = meta["tensors_sha256"]
    except (TypeError, ValueError, KeyError) as e:
        raise FixtureError(
            f"fixture {path}: no valid parity.fixture metadata ({e!r}); delete it to draw it again"
        ) from None
    if meta.get("settings_sha256") != canonical_hash(meta.get("settings")):
        raise FixtureError(f"fixture {path}: its settings do not match their sha256 (corrupt)")
    if tensors_sha256(tensors) != want:
        raise FixtureError(
            f"fixture {path}: its tensors do not match the sha256 recorded when it was drawn "
            "(corrupt); delete it to draw it again"
        )
    return tensors


def expected(settings: Mapping[str, Any]) -> dict[str, tuple[np.dtype, tuple[int, ...] | None]]:
    """What a run's fixture must hold: name → (dtype, shape; None: any shape of that many
    leading dimensions is the data's, checked by :func:`check`), from a run's resolved
    ``settings`` (model, loss, data): every parameter float32 in its PyTorch shape, the
    buffers an own model hands over, ``x`` and ``y``."""
    model, data = settings["model"], settings["data"]
    out: dict[str, tuple[np.dtype, tuple[int, ...] | None]] = {
        n: (np.dtype(np.float32), tuple(s)) for n, s in model_params(model)
    }
    for n, s in (model.get("buffers") or {}).items():
        out[n] = (np.dtype(np.float32), tuple(s))
    lead = (data["batches"], data["batch_size"])
    tokens = model["family"] == "transformer" or (
        model["family"] == "own" and model["io"]["input"]["kind"] == "tokens"
    )
    if model["family"] == "own" and "file" in model["io"]:
        out["x"] = out["y"] = (None, None)  # the user's own data: checked when drawn
        return out
    in_shape, outputs = model_io(model)
    if tokens:
        out["x"] = (np.dtype(np.int64), (*lead, *in_shape))
        out["y"] = (np.dtype(np.int64), (*lead, *in_shape))
    else:
        out["x"] = (np.dtype(np.float32), (*lead, *in_shape))
        if settings["loss"] == "mse":
            target = model["io"]["target"]["shape"] if model["family"] == "own" else [outputs]
            out["y"] = (np.dtype(np.float32), (*lead, *target))
        else:
            out["y"] = (np.dtype(np.int64), lead)
    return out


def check(path: str | os.PathLike, tensors: Mapping[str, np.ndarray], settings) -> None:
    """Refuse a fixture that does not hold what the run needs (:func:`expected`): a tensor
    missing, of another dtype or shape. Raises :class:`FixtureError` naming the file and
    the tensor, as the Rust runners refuse it, before anything is trained."""
    for name, (dtype, shape) in expected(settings).items():
        if name not in tensors:
            raise FixtureError(f"fixture {path}: no tensor {name!r}")
        a = tensors[name]
        if dtype is not None and a.dtype != dtype:
            raise FixtureError(f"fixture {path}: {name} is {a.dtype}, not {dtype}")
        if shape is not None and tuple(a.shape) != shape:
            raise FixtureError(
                f"fixture {path}: {name} has shape {list(a.shape)}, not {list(shape)}"
            )


def write(path: str | os.PathLike, settings: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Draw and write a fixture atomically (:func:`save`); returns the tensors."""
    tensors = draw(settings)
    save(path, tensors, settings)
    return tensors


def save(
    path: str | os.PathLike, tensors: Mapping[str, np.ndarray], settings: Mapping[str, Any]
) -> None:
    """Write ``tensors`` as a fixture atomically. The safetensors metadata
    ``parity.fixture`` records the generator, the settings and the sha256 of the tensors
    (checked by :func:`load`). Each array is written in row-major (C) order whatever its
    memory order: safetensors' numpy ``save_file`` writes an array's memory as it lies, so
    a Fortran-ordered array (a transposed PyTorch parameter's ``.numpy()``) would be read
    back scrambled."""
    # One metadata entry: safetensors keeps metadata in a hash map, so several entries
    # would be written in varying order and the bytes would differ from run to run.
    meta = {
        "parity.fixture": json.dumps(
            {
                "generator": GENERATOR,
                "settings": settings,
                "settings_sha256": canonical_hash(settings),
                "tensors_sha256": tensors_sha256(tensors),
            },
            sort_keys=True,
        )
    }
    with atomic_path(path) as tmp:
        save_file({n: np.ascontiguousarray(a) for n, a in tensors.items()}, str(tmp), metadata=meta)
