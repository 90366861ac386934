"""The training loop beyond the optimizer's update, resolved into explicit settings that every
framework's runner reads alike (docs/loop.md): the learning-rate schedule, gradient clipping,
the optimizer's parameter groups and gradient accumulation.

A run's ``loop`` (in its resolved settings, :func:`resolve_loop`) exists only when one of
them is configured, at the experiment or overridden by the run, so the settings of every
other run stay what they were. Its ``param_groups`` then always list every parameter by its
state_dict key, each in exactly one group, with the group's ``lr`` and ``weight_decay``
explicit; its ``schedule`` has every argument PyTorch's class would default written out; its
``accumulate`` is ``{"micro_batches": k, "reduction": "mean" | "sum"}``. Pure Python.
"""

from __future__ import annotations

import copy
import fnmatch
import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from parity.core.config import ConfigError

#: The loop's keys in an experiment and in a run's override; a run's value replaces the
#: experiment's whole.
LOOP_KEYS = ("schedule", "clip", "param_groups", "accumulate")

#: Each schedule's arguments PyTorch (or transformers) defaults, written out in a resolved
#: schedule (``torch.optim.lr_scheduler``; transformers 5 ``optimization.py``).
SCHEDULE_DEFAULTS: dict[str, dict[str, Any]] = {
    "StepLR": {"gamma": 0.1},
    "MultiStepLR": {"gamma": 0.1},
    "ExponentialLR": {},
    "CosineAnnealingLR": {"eta_min": 0.0},
    "LinearLR": {"start_factor": 1.0 / 3, "end_factor": 1.0, "total_iters": 5},
    "OneCycleLR": {
        "pct_start": 0.3,
        "anneal_strategy": "cos",
        "cycle_momentum": True,
        "base_momentum": 0.85,
        "max_momentum": 0.95,
        "div_factor": 25.0,
        "final_div_factor": 1e4,
        "three_phase": False,
    },
    "SequentialLR": {},
    "get_cosine_schedule_with_warmup": {"num_cycles": 0.5},
    "get_linear_schedule_with_warmup": {},
}
#: The schedules a SequentialLR may chain (one lr per step each, no momentum of their own).
CHAINABLE = ("StepLR", "MultiStepLR", "ExponentialLR", "CosineAnnealingLR", "LinearLR")


def loop_config(exp: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """The loop keys of experiment ``exp`` with run ``override``'s replacing them."""
    return {k: override.get(k, exp.get(k)) for k in LOOP_KEYS if k in override or k in exp}


def resolve_loop(
    where: str,
    exp: Mapping[str, Any],
    override: Mapping[str, Any],
    optimizer: Mapping[str, Any],
    params: Sequence[str],
) -> dict[str, Any] | None:
    """The loop of run ``where`` (``experiments.<e>.runs.<r>``; module docs), or None when
    neither the experiment ``exp`` nor the run's ``override`` configures one and the model
    names no PyTorch optimizer of its own (:func:`own_optimizer`: its experiment always has
    a loop, one group of every parameter unless configured). ``optimizer``
    is the run's resolved optimizer (the groups take their default ``lr`` and
    ``weight_decay`` from it), ``params`` the state_dict keys in order. Raises
    :class:`ConfigError` naming the key (the run's where it overrides, else the
    experiment's) and the reason."""
    cfg = loop_config(exp, override)
    if not cfg and not own_optimizer(exp["model"]):
        return None
    experiment = where.rsplit(".runs.", 1)[0]
    source = {k: f"{where if k in override else experiment}.{k}" for k in LOOP_KEYS}
    steps = exp["steps"]
    acc = cfg.get("accumulate", 1)
    if isinstance(acc, int):
        acc = {"micro_batches": acc}
    return {
        "schedule": (
            resolve_schedule(source["schedule"], cfg["schedule"], optimizer, steps)
            if cfg.get("schedule")
            else None
        ),
        "clip": dict(cfg["clip"]) if cfg.get("clip") else None,
        "param_groups": resolve_groups(
            source["param_groups"], cfg.get("param_groups") or [{}], optimizer, params
        ),
        "accumulate": {
            "micro_batches": acc["micro_batches"],
            "reduction": acc.get("reduction", "mean"),
        },
    }


def resolve_schedule(
    where: str, schedule: Mapping[str, Any], optimizer: Mapping[str, Any], steps: int
) -> dict[str, Any]:
    """A schedule with its defaults written out (:data:`SCHEDULE_DEFAULTS`) and ``order``
    (``after`` unless given); raises :class:`ConfigError` for what PyTorch would refuse:
    milestones not increasing, a SequentialLR whose milestones do not separate its
    schedulers (one fewer) or that chains another than :data:`CHAINABLE`, a OneCycleLR whose
    ``total_steps`` is below the run's steps (PyTorch raises on the step after them)."""
    name = schedule["name"]
    out = {**copy.deepcopy(SCHEDULE_DEFAULTS[name]), **copy.deepcopy(dict(schedule))}
    out.setdefault("order", "after")
    m = out.get("milestones")
    if m is not None and any(b <= a for a, b in itertools.pairwise(m)):
        raise ConfigError(f"{where}.milestones", f"{m} is not increasing")
    if name == "SequentialLR":
        subs = out["schedulers"]
        if len(out["milestones"]) != len(subs) - 1:
            raise ConfigError(
                f"{where}.milestones",
                f"{len(subs)} schedulers need {len(subs) - 1} milestones, not "
                f"{len(out['milestones'])}",
            )
        for i, sub in enumerate(subs):
            if sub["name"] not in CHAINABLE or "order" in sub:
                raise ConfigError(
                    f"{where}.schedulers.{i}",
                    f"a SequentialLR chains {', '.join(CHAINABLE)}, each without its own order",
                )
        out["schedulers"] = [
            {
                k: v
                for k, v in resolve_schedule(
                    f"{where}.schedulers.{i}", sub, optimizer, steps
                ).items()
                if k != "order"
            }
            for i, sub in enumerate(subs)
        ]
    if name == "OneCycleLR" and out["total_steps"] < steps:
        raise ConfigError(
            f"{where}.total_steps",
            f"{out['total_steps']} is fewer than the run's {steps} steps (PyTorch raises on "
            "the step after total_steps)",
        )
    return out


def resolve_groups(
    where: str,
    groups: Sequence[Mapping[str, Any]],
    optimizer: Mapping[str, Any],
    params: Sequence[str],
) -> list[dict[str, Any]]:
    """The parameter groups with every parameter (state_dict order) in exactly one, each
    group's ``lr`` and ``weight_decay`` explicit (the optimizer's where the group gives none).
    A group without ``params`` takes every parameter no other group names and must be the
    last. Raises :class:`ConfigError` naming a parameter in two groups or in none, a pattern
    that matches nothing, a default group that is not last, a group left empty."""
    default = [i for i, g in enumerate(groups) if "params" not in g]
    if default and default != [len(groups) - 1]:
        raise ConfigError(where, "only the last group may leave out params (it takes the rest)")
    owner: dict[str, int] = {}
    for i, g in enumerate(groups):
        for pattern in g.get("params", ()):
            hits = [p for p in params if fnmatch.fnmatchcase(p, pattern)]
            if not hits:
                raise ConfigError(
                    f"{where}.{i}.params", f"{pattern!r} matches no parameter of the model"
                )
            for p in hits:
                if owner.setdefault(p, i) != i:
                    raise ConfigError(
                        f"{where}.{i}.params",
                        f"parameter {p!r} is in group {owner[p]} and group {i}",
                    )
    out = []
    for i, g in enumerate(groups):
        names = [p for p in params if owner.get(p) == i or ("params" not in g and p not in owner)]
        if not names:
            raise ConfigError(f"{where}.{i}", "the group holds no parameter")
        out.append(
            {
                "params": names,
                "lr": float(g.get("lr", optimizer["lr"])),
                "weight_decay": float(g.get("weight_decay", optimizer.get("weight_decay", 0.0))),
            }
        )
    missing = [p for p in params if p not in owner and not default]
    if missing:
        raise ConfigError(
            where,
            f"parameter {missing[0]!r} is in no group (add a last group without params for "
            "the rest)",
        )
    return out


def cycles_momentum(loop: Mapping[str, Any] | None) -> bool:
    """Whether the loop's schedule sets the optimizer's momentum (SGD's ``momentum``, Adam's
    β₁) every step: a OneCycleLR with ``cycle_momentum``. On an SGD that gives it a momentum
    even where the optimizer was built with none, as PyTorch's OneCycleLR does."""
    s = (loop or {}).get("schedule") or {}
    return s.get("name") == "OneCycleLR" and bool(s.get("cycle_momentum"))


def own_optimizer(model: Mapping[str, Any]) -> str | None:
    """The user's own PyTorch optimizer factory an own model names (``model.torch.optimizer``,
    docs/loop.md "Your own loop"), or None."""
    if model.get("family") != "own":
        return None
    return (model.get("torch") or {}).get("optimizer")


def unreplayable_state(optimizer: Mapping[str, Any]) -> list[str]:
    """What of the optimizer's state a same-state replay, which starts from the parameters
    and Adam's ``exp_avg``/``exp_avg_sq``, does not hold: SGD's momentum buffers, amsgrad's
    ``max_exp_avg_sq``."""
    out = []
    if optimizer["name"] == "sgd" and optimizer.get("momentum"):
        out.append("SGD's momentum buffers")
    if optimizer.get("amsgrad"):
        out.append("amsgrad's max_exp_avg_sq")
    return out


def replay_limits(
    settings: Mapping[str, Mapping[str, Any]], params: Callable[[], Sequence[str]]
) -> tuple[str | None, dict[str, list[list[str]]]]:
    """Why the same-state replay cannot replay a comparison of runs whose resolved settings
    are ``settings`` (run → settings; ``params()`` the state_dict keys): the loop features it
    does not run (:func:`features`) or optimizer state it does not hold
    (:func:`unreplayable_state`); None when it can. With a reason, also each run's
    parameter groups (one of every parameter without a loop), by which the localisation
    names a differing update (``parity.localise.job.update_culprit``); else ``{}``."""
    looped = sorted({f for s in settings.values() for f in features(s.get("loop"))})
    stateful = sorted({w for s in settings.values() for w in unreplayable_state(s["optimizer"])})
    if any(own_optimizer(s["model"]) for s in settings.values()):
        stateful.append("the state of the user's own PyTorch optimizer")
    if looped:
        why = (
            f"the same-state replay does not run the training loop's {', '.join(looped)} yet "
            "(docs/loop.md); a culprit among the loop's scalars is named without one"
        )
    elif stateful:
        why = (
            f"the replay's state holds parameters and Adam's moments, not {', '.join(stateful)}"
            " (docs/loop.md); a differing update is named without one"
        )
    else:
        return None, {}
    groups = {
        r: [g["params"] for g in s["loop"]["param_groups"]] if s.get("loop") else [list(params())]
        for r, s in settings.items()
    }
    return why, groups


def features(loop: Mapping[str, Any] | None) -> list[str]:
    """The loop's features a run uses, by config key, in :data:`LOOP_KEYS` order: a
    schedule, clipping, more than one group or a group's own lr or decay (``param_groups``),
    more than one micro-batch or a summed reduction (``accumulate``)."""
    if not loop:
        return []
    out = []
    if loop["schedule"]:
        out.append("schedule")
    if loop["clip"]:
        out.append("clip")
    if len(loop["param_groups"]) > 1:
        out.append("param_groups")
    a = loop["accumulate"]
    if a["micro_batches"] > 1 or a["reduction"] != "mean":
        out.append("accumulate")
    return out
