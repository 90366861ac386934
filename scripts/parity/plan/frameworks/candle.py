"""candle 0.11 (Rust, ``rust/candle-parity``): candle-nn's optimizers or a hand-written
AdamW, the convolution through conv2d (default) or conv1d."""

from __future__ import annotations

from collections.abc import Mapping

from parity.core.config import ConfigError

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
    """candle's side of a run: AdamW's ``implementation`` (candle-nn's ``candle`` or the
    hand-written ``manual``) and ``bias_correction`` (``f64`` factors, or ``f32`` with the
    manual one); the CNN's ``conv_impl`` (``conv2d`` by default). Raises
    :class:`ConfigError` for what candle-nn 0.11 lacks (Adam, SGD momentum or weight
    decay), f32 factors without ``manual``, ``conv_impl`` on a model without a
    convolution, and moments candle-nn keeps private."""
    optimizer = settings["optimizer"]
    name = optimizer["name"]
    if name == "adam":
        raise ConfigError(
            f"{where}.optimizer.name",
            "candle-nn 0.11.0 has no Adam; use adamw with weight_decay 0 "
            "(PyTorch's Adam equals AdamW(weight_decay=0) bit for bit)",
        )
    if name == "sgd" and (optimizer.get("momentum", 0) or optimizer.get("weight_decay", 0)):
        raise ConfigError(
            f"{where}.optimizer", "candle-nn 0.11.0's SGD has no momentum and no weight decay"
        )
    if name == "adamw":
        optimizer.setdefault("implementation", "candle")
        optimizer.setdefault("bias_correction", "f64")
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
    manual = name == "adamw" and optimizer.get("implementation") == "manual"
    if settings["record"].get("moments") and not manual:
        raise ConfigError(
            f"{where}.record.moments",
            "candle-nn keeps AdamW's moments private; use implementation: manual",
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
