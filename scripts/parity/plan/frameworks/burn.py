"""burn 0.22 (Rust, ``rust/burn-parity``): burn's ndarray backend (CPU only), burn-optim's
own SGD, Adam and AdamW, burn's conv1d."""

from __future__ import annotations

from collections.abc import Mapping

from parity.core.config import ConfigError

NAME = "burn"
RUST = True
#: The release rust/Cargo.toml and rust/Cargo.lock pin; other releases build from their own
#: lock file (``parity.plan.versions``).
PINNED_VERSION = "0.22.1"
#: The crates of that release burn-parity depends on, each pinned ``=PINNED_VERSION``.
CRATES = ("burn",)
UNSUPPORTED = {
    (dev, dt): "burn-parity runs burn's ndarray backend, which is CPU only"
    for dev in ("cuda", "metal")
    for dt in ("f32", "f64")
}
FAULTS: dict[str, str] = {}


def resolve_run(where: str, exp: Mapping, settings: dict, override: Mapping, config: Mapping):
    """burn's side of a run: burn-optim 0.22's own SGD, Adam (L2 weight decay, as
    torch.optim.Adam) and AdamW (decoupled), all with every hyperparameter explicit; both
    Adams compute their bias-correction factors in float32, which the resolved settings say
    (``implementation: burn``, ``bias_correction: f32``). The convolution is burn's own
    conv1d. Raises :class:`ConfigError` for candle-side settings, SGD momentum or weight
    decay (the run spec carries neither) and moments of SGD, which has none (Adam's and
    AdamW's are read back from burn's optimizer record)."""
    optimizer = settings["optimizer"]
    if "implementation" in optimizer or "bias_correction" in optimizer:
        raise ConfigError(
            f"{where}.optimizer",
            "implementation and bias_correction are candle-side settings; burn runs its "
            "own optimizers (bias correction in float32)",
        )
    if optimizer["name"] == "sgd" and (
        optimizer.get("momentum", 0) or optimizer.get("weight_decay", 0)
    ):
        raise ConfigError(
            f"{where}.optimizer",
            "burn runs plain SGD here: the run spec carries no SGD momentum or weight decay",
        )
    if optimizer["name"] in ("adam", "adamw"):
        optimizer.update(implementation="burn", bias_correction="f32")
    if "conv_impl" in override:
        raise ConfigError(
            f"{where}.conv_impl", "conv_impl is a candle-side setting; burn calls its conv1d"
        )
    if exp["model"]["family"] == "cnn1d":
        settings["model"]["conv_impl"] = "conv1d"
    if exp["model"]["family"] == "transformer":
        # burn-nn's LayerNorm, burn's softmax and exact GELU: the differentiable forms.
        settings["model"].update(layer_norm="composed", softmax="generic", gelu="erf")
    if settings["record"].get("moments") and optimizer["name"] == "sgd":
        raise ConfigError(
            f"{where}.record.moments",
            "burn's SGD (no momentum) has no moments to record; Adam and AdamW have",
        )
