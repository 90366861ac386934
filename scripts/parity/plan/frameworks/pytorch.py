"""PyTorch, the reference framework (``parity.train.torch``, ``parity.probe.torch``)."""

from __future__ import annotations

from collections.abc import Mapping

from parity.core.config import ConfigError

NAME = "torch"
RUST = False
UNSUPPORTED = {("metal", "f64"): "PyTorch's MPS backend has no float64"}
FAULTS = {
    "relu_grad_at_zero": "relu'(0) = 1 instead of PyTorch's 0 (candle 0.11.0's convention)",
}


def resolve_run(where: str, exp: Mapping, settings: dict, override: Mapping, config: Mapping):
    """PyTorch's side of a run: the optimizer code path (``optimizer_path``: the run's,
    else config ``torch.optimizer_path``, else ``single_tensor``) and a transformer's
    attention path (``attention``: ``explicit`` or ``sdpa``). Raises :class:`ConfigError`
    for candle-side optimizer settings and ``attention`` on another family."""
    settings["optimizer_path"] = override.get(
        "optimizer_path", config.get("torch", {}).get("optimizer_path", "single_tensor")
    )
    if exp["model"]["family"] == "transformer":
        settings["model"]["attention"] = override.get("attention", "explicit")
    elif "attention" in override:
        raise ConfigError(f"{where}.attention", "only transformer models have attention")
    optimizer = settings["optimizer"]
    if "implementation" in optimizer or "bias_correction" in optimizer:
        raise ConfigError(
            f"{where}.optimizer", "implementation and bias_correction are candle-side settings"
        )
