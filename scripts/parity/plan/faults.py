"""Fault instances and the learning-rate sensitivity search, resolved from config ``faults``.

A *fault* is a deliberate mistake in one run (run setting ``fault``, or an existing setting
such as a weight-decay mismatch). A *fault instance* (config ``faults.instances.<name>``)
is such a run of a base experiment, ``<run>_fault_<name>``, compared as ``fault_<name>``
with the clean run of the other side, expected to fail. Fault instances and the
sensitivity search are not in the default target (docs/detection.md).
Pure Python: importing this must stay cheap.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping

from parity.core.config import MAIN, ConfigError, merge
from parity.plan import frameworks
from parity.plan.resolve import resolve_run


def resolve_fault(
    name: str, inst: Mapping, config: Mapping, experiments: Mapping[str, dict]
) -> tuple[dict, dict, dict] | str:
    """One fault instance: (the fault's description record, the faulty run's settings, its
    comparison spec), or the reason it is left out (its experiment is not configured or is
    disabled).

    The faulty run ``<run>_fault_<name>`` is the base run's override with the instance's
    merged over it; its comparison ``fault_<name>`` is with the clean run ``against``
    (default: the other side of the experiment's ``main`` comparison), expected to fail.
    ``experiments`` are the resolved enabled experiments. Raises :class:`ConfigError` for an
    instance naming a run the experiment lacks, or clashing with an existing name.
    """
    where = f"faults.instances.{name}"
    e = inst["experiment"]
    if e not in config["experiments"]:
        return f"experiment {e} is not in this config"
    if e not in experiments:
        return f"experiment {e} is disabled"
    exp = experiments[e]
    ((base, override),) = inst["run"].items()
    raw_runs = config["experiments"][e].get("runs") or {"torch": {}, "candle": {}}
    if base not in raw_runs:
        raise ConfigError(
            f"{where}.run", f"{base!r} is not a run of {e} (runs: {', '.join(raw_runs)})"
        )
    run = f"{base}_fault_{name}"
    comparison = f"fault_{name}"
    if run in exp["runs"] or comparison in exp["comparisons"]:
        raise ConfigError(where, f"{e} already has a run {run} or a comparison {comparison}")
    against = inst.get("against")
    if against is None:
        main = exp["comparisons"].get(MAIN, {})
        other = {
            main.get("candidate"): main.get("reference"),
            main.get("reference"): main.get("candidate"),
        }
        against = other.get(base)
        if against is None:
            raise ConfigError(
                f"{where}.against",
                f"{base!r} is not a side of {e}'s main comparison; name the clean run to "
                "compare with",
            )
    if against not in exp["runs"]:
        raise ConfigError(
            f"{where}.against", f"{against!r} is not a run of {e} (runs: {', '.join(exp['runs'])})"
        )
    merged = merge(raw_runs[base] or {}, override or {})
    settings = resolve_run(f"{where}.run.{base}", exp, run, merged, config)
    spec = {
        "reference": against,
        "candidate": run,
        "expect": "fail",
        "tolerance": float(config["tolerance"]),
    }
    record = {
        "name": name,
        "experiment": e,
        "description": inst["description"],
        "note": inst.get("note", ""),
        "site": inst.get("site"),
        "side": frameworks.framework_of(base),
        "base": base,
        "run": run,
        "against": against,
        "comparison": comparison,
        "kind": settings.get("fault", {}).get("kind", ""),
    }
    return record, settings, spec


def resolve_sensitivity(sens: Mapping, config: Mapping, experiments: Mapping) -> dict | None:
    """Config ``faults.sensitivity``: which run's learning rate is perturbed, against which
    clean run, over which decades of δ, with how many bisections (see
    ``sensitivity.sensitivity``), with the perturbed run's settings (``settings``) and
    the clean run's (``against_settings``). None when its experiment is not configured or is
    disabled. Raises :class:`ConfigError` for an own model's experiment, runs the
    experiment lacks or an empty range."""
    where = "faults.sensitivity"
    e = sens["experiment"]
    if e not in experiments:
        return None
    if experiments[e]["model"]["family"] == "own":
        raise ConfigError(
            f"{where}.experiment",
            f"{e!r} is an own model: the sensitivity search retrains the workflow's built-in "
            "models only (name an experiment of the mlp, cnn1d or transformer family)",
        )
    runs = experiments[e]["runs"]
    against = sens.get("against", "torch")
    for key, run in (("run", sens["run"]), ("against", against)):
        if run not in runs:
            raise ConfigError(
                f"{where}.{key}", f"{run!r} is not a run of {e} (runs: {', '.join(runs)})"
            )
    lo, hi = sens["log10_range"]
    if lo >= hi:
        raise ConfigError(f"{where}.log10_range", f"[{lo}, {hi}] is empty")
    return {
        "experiment": e,
        "run": sens["run"],
        "against": against,
        "log10_range": [lo, hi],
        "bisections": sens.get("bisections", 6),
        "lr": runs[sens["run"]]["optimizer"]["lr"],
        "tolerance": float(config["tolerance"]),
        "steps": experiments[e]["steps"],
        "settings": copy.deepcopy(runs[sens["run"]]),
        "against_settings": copy.deepcopy(runs[against]),
    }


def perturbed_settings(settings: Mapping, delta: float) -> dict:
    """A run's settings with its learning rate multiplied by (1 + δ): the sensitivity
    search's run ``<run>_sensitivity``."""
    out = copy.deepcopy(dict(settings))
    out["optimizer"]["lr"] = settings["optimizer"]["lr"] * (1 + delta)
    return out
