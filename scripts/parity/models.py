"""Model families: the parameters each one has, in PyTorch state_dict order and layout.

Pure Python and cheap to import (it runs while the DAG is built). The Rust runners declare
the same lists (``candle-parity``'s ``model::expected_params``) and refuse a run spec whose
list differs (``parity_common::spec::RunSpec::check``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from .config import ConfigError


def model_params(model: Mapping[str, Any]) -> list[tuple[str, tuple[int, ...]]]:
    """Parameters of a model family as (state_dict key, PyTorch shape), in state_dict order.

    ``mlp``: ``fc{i}.weight`` ``[sizes[i], sizes[i-1]]`` and ``fc{i}.bias`` ``[sizes[i]]``.
    ``cnn1d``: ``conv.weight`` ``[channels, in_channels, kernel]``, ``conv.bias``,
    ``fc.weight`` ``[classes, channels·(length − kernel + 1)]``, ``fc.bias``.
    Raises ``ValueError`` for an unknown family.
    """
    family = model["family"]
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
    raise ValueError(f"unknown model family {family!r}")


def model_io(model: Mapping[str, Any]) -> tuple[tuple[int, ...], int]:
    """(input shape of one sample, number of outputs) of a model."""
    if model["family"] == "mlp":
        return (model["sizes"][0],), model["sizes"][-1]
    return (model["in_channels"], model["length"]), model["classes"]


def count_params(model: Mapping[str, Any]) -> int:
    """Total number of scalar parameters."""
    return sum(math.prod(s) for _, s in model_params(model))


def check_model(where: str, model: Mapping, loss: str) -> None:
    """What the config schema cannot say about a model: a kernel that fits the input, a
    declared ``fc_in`` that matches the convolution, enough classes for cross-entropy.
    Raises :class:`ConfigError` at ``where`` (the model's key path)."""
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
    if loss == "cross_entropy" and model_io(model)[1] < 2:
        raise ConfigError(where, "cross-entropy needs at least two outputs (classes)")
