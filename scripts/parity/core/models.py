"""Model families: the parameters each one has, in PyTorch state_dict order and layout.

Pure Python and cheap to import (it runs while the DAG is built). The Rust runners declare
the same lists (``candle-parity``'s ``model::expected_params``) and refuse a run spec whose
list differs (``parity_common::spec::RunSpec::check``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from parity.core.config import ConfigError


def model_params(model: Mapping[str, Any]) -> list[tuple[str, tuple[int, ...]]]:
    """Parameters of a model family as (state_dict key, PyTorch shape), in state_dict order.

    ``mlp``: ``fc{i}.weight`` ``[sizes[i], sizes[i-1]]`` and ``fc{i}.bias`` ``[sizes[i]]``.
    ``cnn1d``: ``conv.weight`` ``[channels, in_channels, kernel]``, ``conv.bias``,
    ``fc.weight`` ``[classes, channels·(length − kernel + 1)]``, ``fc.bias``.
    ``transformer`` (V = ``vocab``, d = ``d_model``, T = ``seq_len``): ``tok_emb.weight``
    ``[V, d]``, ``pos_emb.weight`` ``[T, d]``; per block ``blocks.{i}.``: ``ln1.weight``,
    ``ln1.bias`` ``[d]``, ``attn.{q,k,v,out}.weight`` ``[d, d]`` and ``.bias`` ``[d]`` (none
    for ``attn.k``: a key bias shifts every score of a query alike, the softmax cancels it,
    and its gradient is pure rounding noise that Adam scales up to learning-rate steps),
    ``ln2.weight``, ``ln2.bias``, ``mlp.fc1.weight`` ``[4d, d]``, ``mlp.fc1.bias`` ``[4d]``,
    ``mlp.fc2.weight`` ``[d, 4d]``, ``mlp.fc2.bias`` ``[d]``; then ``ln_f.weight``,
    ``ln_f.bias`` and ``head.weight`` ``[V, d]`` (no bias, not tied to ``tok_emb``).
    ``own`` (a user's model, ``parity.plan.own``): the resolved ``params``, read from the
    PyTorch model itself, each tied tensor once.
    Raises ``ValueError`` for an unknown family.
    """
    family = model["family"]
    if family == "own":
        return [(n, tuple(s)) for n, s in model["params"]]
    if family == "mlp":
        sizes = model["sizes"]
        out = []
        for i in range(1, len(sizes)):
            out.append((f"fc{i}.weight", (sizes[i], sizes[i - 1])))
            out.append((f"fc{i}.bias", (sizes[i],)))
        return out
    if family == "cnn1d":
        c, k = model["channels"], model["kernel"]
        out_len = model["length"] - k + 1
        return [
            ("conv.weight", (c, model["in_channels"], k)),
            ("conv.bias", (c,)),
            ("fc.weight", (model["classes"], c * out_len)),
            ("fc.bias", (model["classes"],)),
        ]
    if family == "transformer":
        v, d, t = model["vocab"], model["d_model"], model["seq_len"]
        out = [("tok_emb.weight", (v, d)), ("pos_emb.weight", (t, d))]
        for i in range(model["blocks"]):
            b = f"blocks.{i}."
            out += [(b + "ln1.weight", (d,)), (b + "ln1.bias", (d,))]
            for m in ("q", "k", "v", "out"):
                out.append((b + f"attn.{m}.weight", (d, d)))
                if m != "k":  # no key bias: the softmax over the keys cancels it
                    out.append((b + f"attn.{m}.bias", (d,)))
            out += [(b + "ln2.weight", (d,)), (b + "ln2.bias", (d,))]
            out += [(b + "mlp.fc1.weight", (4 * d, d)), (b + "mlp.fc1.bias", (4 * d,))]
            out += [(b + "mlp.fc2.weight", (d, 4 * d)), (b + "mlp.fc2.bias", (d,))]
        return [*out, ("ln_f.weight", (d,)), ("ln_f.bias", (d,)), ("head.weight", (v, d))]
    raise ValueError(f"unknown model family {family!r}")


def model_io(model: Mapping[str, Any]) -> tuple[tuple[int, ...], int]:
    """(input shape of one sample, number of outputs) of a model; a transformer's sample is
    ``seq_len`` token ids and its outputs are ``vocab`` logits per position; an own model's
    comes from its resolved ``io`` (a data file's shapes are known only to its jobs: ``()``
    and 1 here)."""
    if model["family"] == "own":
        io = model["io"]
        shape = tuple(io["input"].get("shape", ()))
        if io["target"]["kind"] == "tokens":
            return shape, io["input"]["vocab"]
        if io["target"]["kind"] == "classes":
            return shape, io["target"]["classes"]
        return shape, math.prod(io["target"].get("shape", [1]))
    if model["family"] == "mlp":
        return (model["sizes"][0],), model["sizes"][-1]
    if model["family"] == "transformer":
        return (model["seq_len"],), model["vocab"]
    return (model["in_channels"], model["length"]), model["classes"]


def count_params(model: Mapping[str, Any]) -> int:
    """Total number of scalar parameters."""
    return sum(math.prod(s) for _, s in model_params(model))


def check_model(where: str, model: Mapping, loss: str) -> None:
    """What the config schema cannot say about a model: a kernel that fits the input, a
    declared ``fc_in`` that matches the convolution, enough classes for cross-entropy.
    Raises :class:`ConfigError` at ``where`` (the model's key path). An own model is checked
    while it is resolved (``parity.plan.own``)."""
    if model["family"] == "own":
        return
    if model["family"] == "cnn1d" and model["kernel"] > model["length"]:
        raise ConfigError(
            f"{where}.kernel",
            f"kernel {model['kernel']} is longer than the input length {model['length']}",
        )
    if model["family"] == "cnn1d" and "fc_in" in model:
        (_, (_, fc_in)) = model_params(model)[2]
        if model["fc_in"] != fc_in:
            raise ConfigError(
                f"{where}.fc_in",
                f"fc takes {model['fc_in']} inputs but the convolution gives "
                f"channels·(length − kernel + 1) = {fc_in}",
            )
    if model["family"] == "transformer":
        if model["d_model"] % model["heads"]:
            raise ConfigError(
                f"{where}.heads",
                f"d_model {model['d_model']} is not a multiple of heads {model['heads']}",
            )
        if loss != "cross_entropy":
            raise ConfigError(where, "a transformer is trained on the next-token cross_entropy")
    if loss == "cross_entropy" and model_io(model)[1] < 2:
        raise ConfigError(where, "cross-entropy needs at least two outputs (classes)")
