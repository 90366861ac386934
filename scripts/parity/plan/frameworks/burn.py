"""burn 0.22 (Rust, ``rust/burn-parity``): burn's ndarray or Flex backend (CPU only), burn-optim's
own SGD, Adam and AdamW, its schedulers, clipping and parameter groups (docs/loop.md), burn's
conv1d."""

from __future__ import annotations

from collections.abc import Mapping

from parity.core.config import ConfigError
from parity.plan.loop import cycles_momentum

NAME = "burn"
RUST = True
#: The release rust/Cargo.toml and rust/Cargo.lock pin; other releases build from their own
#: lock file (``parity.plan.versions``).
PINNED_VERSION = "0.22.1"
#: The crates of that release burn-parity depends on, each pinned ``=PINNED_VERSION``.
CRATES = ("burn",)
#: burn's CPU backends, the cargo feature of burn-parity (and of the facade crate) → the crate
#: that is the backend, the default first: a config release ``0.22.1+flex`` builds Flex
#: (``parity.plan.versions``). burn 0.23 has no ``ndarray`` feature.
BACKENDS = {"ndarray": "burn-ndarray", "flex": "burn-flex"}
UNSUPPORTED = {
    (dev, dt): "burn-parity runs burn's CPU backends (ndarray, Flex), which are CPU only"
    for dev in ("cuda", "metal")
    for dt in ("f32", "f64")
}
FAULTS: dict[str, str] = {}


def resolve_run(where: str, exp: Mapping, settings: dict, override: Mapping, config: Mapping):
    """burn's side of a run: burn-optim 0.22's own SGD (momentum, dampening, Nesterov and L2
    weight decay through ``MomentumConfig`` and ``WeightDecayConfig``), Adam (L2 weight
    decay, as torch.optim.Adam) and AdamW (decoupled), with amsgrad, all with every
    hyperparameter explicit; both Adams compute their bias-correction factors in float32,
    which the resolved settings say (``implementation: burn``, ``bias_correction: f32``).
    The training loop is burn's where burn has it (:func:`resolve_loop`). The convolution is
    burn's own conv1d. Raises :class:`ConfigError` for candle-side settings, a loop part burn
    cannot run, and moments of SGD (Adam's and AdamW's are read back from burn's optimizer
    record)."""
    optimizer = settings["optimizer"]
    if "implementation" in optimizer or "bias_correction" in optimizer:
        raise ConfigError(
            f"{where}.optimizer",
            "implementation and bias_correction are candle-side settings; burn runs its "
            "own optimizers (bias correction in float32)",
        )
    if optimizer["name"] in ("adam", "adamw"):
        optimizer.update(implementation="burn", bias_correction="f32")
    resolve_loop(where, exp, settings, override)
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
            "burn's SGD has no moments to record (no exp_avg/exp_avg_sq); Adam and AdamW have",
        )


def resolve_loop(where: str, exp: Mapping, settings: dict, override: Mapping) -> None:
    """burn's side of the run's training loop (docs/loop.md). ``clip_impl`` (``builtin``, the
    default, or ``total_norm``) says how a norm clip runs: burn's ``GradientClipping::Norm``,
    a norm per parameter (the resolved clip becomes ``{norm_per_parameter: max_norm}``), or
    PyTorch's total norm composed by hand (``{norm: max_norm}``). Raises
    :class:`ConfigError` for ``clip_impl`` without a norm clip, OneCycleLR's momentum
    cycling (burn's optimizers fix the momentum and β₁ when built) and a schedule burn's own
    scheduler refuses (:func:`check_builtin_schedule`)."""
    loop = settings.get("loop")
    clip_impl = override.get("clip_impl", "builtin")
    clip = loop and loop["clip"]
    if "clip_impl" in override and not (clip and "norm" in clip):
        raise ConfigError(f"{where}.clip_impl", "clip_impl chooses how a clip: {norm} runs")
    if not loop:
        return
    if clip and "norm" in clip and clip_impl == "builtin":
        loop["clip"] = {"norm_per_parameter": clip["norm"]}
    schedule = loop["schedule"]
    if schedule:
        key = (
            f"{where}.schedule"
            if "schedule" in override
            else f"{where.rsplit('.runs.', 1)[0]}.schedule"
        )
        if cycles_momentum(loop):
            raise ConfigError(
                f"{key}.cycle_momentum",
                "burn's optimizers fix the momentum and β₁ when built: OneCycleLR cannot cycle "
                "them on burn (set cycle_momentum: false)",
            )
        for group in loop["param_groups"]:
            check_builtin_schedule(key, schedule, group["lr"])


#: The schedules burn computes with its own schedulers (the rest are hand-written
#: ``LrScheduler``s, rust/burn-parity/src/schedule.rs).
BUILTIN_SCHEDULES = ("StepLR", "ExponentialLR", "CosineAnnealingLR", "LinearLR", "SequentialLR")


def check_builtin_schedule(where: str, schedule: Mapping, lr: float) -> None:
    """What burn-optim 0.22's own scheduler refuses of ``schedule`` on a group whose learning
    rate is ``lr``, refused before any job with burn's reason: an initial learning rate
    outside (0, 1] (linear, cosine, exponential), a final one outside [0, 1] (linear), a
    minimum above the initial one (cosine), γ outside (0, 1] (exponential), a SequentialLR
    milestone of 0. A SequentialLR that chains a schedule burn lacks is hand-written whole,
    and checked for nothing."""
    name = schedule["name"]
    if name == "SequentialLR":
        subs = schedule["schedulers"]
        if any(sub["name"] not in BUILTIN_SCHEDULES for sub in subs):
            return
        if schedule["milestones"][0] == 0:
            raise ConfigError(f"{where}.milestones", "burn's SequentialLr refuses a milestone of 0")
        for i, sub in enumerate(subs):
            check_builtin_schedule(f"{where}.schedulers.{i}", sub, lr)
        return
    initial = lr * schedule["start_factor"] if name == "LinearLR" else lr
    if name in ("LinearLR", "CosineAnnealingLR", "ExponentialLR") and not 0 < initial <= 1:
        raise ConfigError(
            where,
            f"burn's {name[:-2]} scheduler refuses an initial learning rate {initial} outside "
            "(0, 1]",
        )
    if name == "LinearLR" and not 0 <= lr * schedule["end_factor"] <= 1:
        raise ConfigError(
            f"{where}.end_factor", "burn's linear scheduler refuses a final rate outside [0, 1]"
        )
    if name == "CosineAnnealingLR" and not 0 <= schedule["eta_min"] <= lr:
        raise ConfigError(
            f"{where}.eta_min",
            f"burn's cosine scheduler refuses a minimum outside [0, {lr}] (the initial rate)",
        )
    if name == "ExponentialLR" and not 0 < schedule["gamma"] <= 1:
        raise ConfigError(f"{where}.gamma", "burn's exponential scheduler refuses γ outside (0, 1]")
