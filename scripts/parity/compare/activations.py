"""Hidden-unit pre-activations recomputed in float64 from a trace's parameters.

Used to explain sudden jumps in a per-step table: when two runs' parameters drift apart,
one sample can cross a ReLU kink in one run and not in the other, after which the
gradients differ by more than rounding. ``active_counts`` counts, per hidden unit, the
samples of a batch whose pre-activation is positive.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from parity.core.models import model_params


def _param(params: Mapping[str, np.ndarray], name: str, shape) -> np.ndarray:
    return np.asarray(params[name], np.float64).reshape(shape)


def preactivations(
    model: Mapping[str, Any], params: Mapping[str, np.ndarray], x: np.ndarray
) -> dict[str, np.ndarray]:
    """Pre-activations of every hidden layer followed by a ReLU, in float64.

    ``params``: flat arrays by state_dict key (any float dtype, widened exactly);
    ``x``: one batch ``[batch, *input]``. Returns layer label → ``[batch, *units]``:
    ``fc{i}`` ``[batch, width]`` for an MLP's hidden layers, ``conv`` ``[batch, channels,
    positions]`` for the CNN.
    """
    shapes = dict(model_params(model))
    h = np.asarray(x, np.float64)
    out = {}
    if model["family"] == "mlp":
        layers = len(model["sizes"]) - 1
        for i in range(1, layers):
            w = _param(params, f"fc{i}.weight", shapes[f"fc{i}.weight"])
            b = _param(params, f"fc{i}.bias", shapes[f"fc{i}.bias"])
            z = h @ w.T + b
            out[f"fc{i}"] = z
            h = np.maximum(z, 0.0)
        return out
    if model["family"] == "cnn1d":
        w = _param(params, "conv.weight", shapes["conv.weight"])  # [o, c, k]
        b = _param(params, "conv.bias", shapes["conv.bias"])
        windows = sliding_window_view(h, w.shape[2], axis=2)  # [batch, c, positions, k]
        out["conv"] = np.einsum("bcpk,ock->bop", windows, w) + b[None, :, None]
        return out
    raise ValueError(f"unknown model family {model['family']!r}")


def active_counts(model, params, x) -> dict[str, np.ndarray]:
    """Per hidden unit, how many samples of the batch have a positive pre-activation."""
    return {k: (z > 0).sum(axis=0) for k, z in preactivations(model, params, x).items()}


def unit_label(layer: str, index: tuple[int, ...]) -> str:
    """``fc1[7]`` or ``conv[2, 5]`` (channel, position)."""
    return f"{layer}[{', '.join(str(i) for i in index)}]"


def first_difference(a: Mapping[str, np.ndarray], b: Mapping[str, np.ndarray]):
    """(number of units whose counts differ, first such unit label, count a, count b);
    the label is "" and the counts None when they agree everywhere."""
    total, first = 0, ("", None, None)
    for layer in a:
        diff = a[layer] != b[layer]
        n = int(diff.sum())
        if n and not total:
            idx = tuple(int(i) for i in np.argwhere(diff)[0])
            first = (unit_label(layer, idx), int(a[layer][idx]), int(b[layer][idx]))
        total += n
    return (total, *first)
