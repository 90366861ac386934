"""candle 0.11 (Rust, ``rust/candle-parity``): candle-nn's optimizers, a hand-written copy of
its AdamW, or the porter's hand-written recipes of what candle-nn lacks (docs/loop.md); the
convolution through conv2d (default) or conv1d."""

from __future__ import annotations

from collections.abc import Mapping

from parity.core.config import ConfigError
from parity.plan.loop import cycles_momentum

NAME = "candle"
RUST = True
#: The release rust/Cargo.toml and rust/Cargo.lock pin (the study's); other releases build
#: from their own lock file (``parity.plan.versions``).
PINNED_VERSION = "0.11.0"
#: The crates of that release candle-parity depends on, each pinned ``=PINNED_VERSION``.
CRATES = ("candle-core", "candle-nn")
UNSUPPORTED = {("metal", "f64"): "candle's Metal backend has no float64"}
FAULTS = {
    "eps_in_sqrt": "AdamW divides by √(v̂ + ε) instead of √v̂ + ε",
    "no_bias_correction": "AdamW without bias correction (m̂ = m, v̂ = v)",
    "step_from_zero": "AdamW's step counter starts at 0 (bias correction for t − 1)",
    "mse_sum": "MSE summed over the elements instead of averaged",
    "transposed_weight": "every square MLP weight used as W instead of Wᵀ",
    "skip_update": "the optimizer step of one step skipped",
}
#: Faults in the AdamW update; candle has them in its hand-written AdamW only.
ADAMW_FAULTS = frozenset({"eps_in_sqrt", "no_bias_correction", "step_from_zero"})


def resolve_run(where: str, exp: Mapping, settings: dict, override: Mapping, config: Mapping):
    """candle's side of a run: the optimizer's ``implementation`` and the CNN's
    ``conv_impl`` (``conv2d`` by default).

    candle-nn 0.11 has SGD without momentum or weight decay and AdamW; the rest of the
    loop a porter writes by hand (docs/loop.md), and so does candle-parity, as the
    ``recipe`` implementation: an SGD with momentum, dampening, Nesterov or weight decay,
    an Adam (L2 decay) and an AdamW with ``amsgrad`` are the recipes (``implementation``
    set to ``recipe``); a plain AdamW is candle-nn's (``candle``, default) or its hand-written
    copy (``manual``), and may be the recipe on request. ``bias_correction`` is ``f64``, or
    ``f32`` with the manual one. Raises :class:`ConfigError` for f32 factors without
    ``manual``, an ``implementation`` that cannot do what the optimizer asks, ``conv_impl``
    on a model without a convolution, and moments candle-nn keeps private."""
    optimizer = settings["optimizer"]
    name = optimizer["name"]
    sgd_extras = [
        k for k in ("momentum", "dampening", "nesterov", "weight_decay") if optimizer.get(k)
    ]
    if name == "sgd" and (sgd_extras or cycles_momentum(settings.get("loop"))):
        # a OneCycleLR cycling the momentum gives even a plain SGD one, which candle-nn's
        # SGD has no field for
        optimizer["implementation"] = "recipe"
    if name == "adam":
        if optimizer.get("implementation", "recipe") != "recipe":
            raise ConfigError(
                f"{where}.optimizer.implementation",
                "candle-nn 0.11.0 has no Adam: the hand-written one is the recipe",
            )
        optimizer["implementation"] = "recipe"
    if name in ("adam", "adamw"):
        default = "recipe" if optimizer.get("amsgrad") else "candle"
        optimizer.setdefault("implementation", default)
        optimizer.setdefault("bias_correction", "f64")
        if optimizer.get("amsgrad") and optimizer["implementation"] != "recipe":
            raise ConfigError(
                f"{where}.optimizer.amsgrad",
                f"candle-nn's AdamW has no amsgrad ({optimizer['implementation']!r}); the "
                "hand-written recipe has",
            )
        if optimizer["bias_correction"] == "f32" and optimizer["implementation"] != "manual":
            raise ConfigError(
                f"{where}.optimizer.bias_correction",
                "float32 bias-correction factors need implementation: manual",
            )
    if exp["model"]["family"] == "cnn1d":
        settings["model"]["conv_impl"] = override.get("conv_impl", "conv2d")
    elif "conv_impl" in override:
        raise ConfigError(f"{where}.conv_impl", "only cnn1d models have a convolution")
    if exp["model"]["family"] == "transformer":
        for key, default in TRANSFORMER_OPS.items():
            settings["model"][key] = override.get(key, default)
        if settings["model"]["layer_norm"] == "fused":
            settings["unsupported"] = {"f64": FUSED_F64}
    else:
        for key in TRANSFORMER_OPS:
            if key in override:
                raise ConfigError(f"{where}.{key}", "only transformer models have this op")
    exposed = name in ("adam", "adamw") and optimizer["implementation"] in ("manual", "recipe")
    if settings["record"].get("moments") and not exposed:
        raise ConfigError(
            f"{where}.record.moments",
            "candle-nn keeps AdamW's moments private (and SGD has none); use implementation: "
            "manual or recipe",
        )


#: A transformer run's op choices and their defaults: the differentiable forms.
TRANSFORMER_OPS = {"layer_norm": "composed", "softmax": "generic", "gelu": "erf"}

#: Why a candle run with the fused layer norm has no float64 cell: candle's own message
#: (sic), which candle-parity's tests/transformer.rs checks.
FUSED_F64 = (
    "candle 0.11.0's fused layer norm has no float64 CPU kernel: "
    '"unsupported dtype for rmsnorm F64"'
)


def needs_manual_adamw(kind: str) -> bool:
    """Whether fault ``kind`` lives in the hand-written AdamW (``implementation: manual``)."""
    return kind in ADAMW_FAULTS
