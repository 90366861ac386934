"""An experiment of ``config.yaml`` resolved into its runs' settings.

Terms:

* *experiment*: a model, a loss, fixture data, an optimizer and a step count (config key
  ``experiments.<name>``);
* *run*: one side of an experiment, named after its framework (``torch``, ``candle``,
  ``candle_f32factors``, ``burn``); it may override the optimizer or a framework option;
* *comparison*: a reference run against a candidate run (``main`` is the study's pair).

A run's resolved settings (:func:`resolve_run`) are everything that defines its computation:
framework, model, loss, data, steps, record, optimizer, framework options and ``fault``.
They are what a training job receives, and their hash is the trace's ``config_hash``.
Pure Python: importing this must stay cheap.
"""

from __future__ import annotations

import copy
import itertools
import os
from collections.abc import Mapping
from typing import Any

from parity.core.config import MAIN, RECORD_DEFAULTS, ConfigError, merge
from parity.core.models import check_model, model_params
from parity.plan import frameworks, limits, own, versions
from parity.plan.frameworks import candle
from parity.plan.loop import resolve_loop


def resolve_experiment(
    name: str, exp: Mapping, config: Mapping, workdir: str | None = None
) -> dict:
    """Config ``experiments.<name>`` with defaults filled in: runs (default torch and
    candle) resolved by :func:`resolve_run`, comparisons (default ``main``: torch against
    candle, or burn where the runs have no candle) with ``expect`` and ``tolerance``, the
    ``record`` setting merged from the top level; for an experiment in
    ``determinism.experiments`` each run again as ``<run>_repeat``, compared bit for bit;
    the runs and comparisons of each further release of a Rust framework
    (``versions.add_release_runs``); an own model (family ``own``) resolved by
    :func:`parity.plan.own.resolve_model` from its model card (``workdir``: what its paths
    are relative to). Raises :class:`ConfigError` listing every problem of the
    experiment."""
    where = f"experiments.{name}"
    exp = copy.deepcopy(dict(exp))
    if exp["model"]["family"] == "own":
        exp["model"] = own.resolve_model(
            f"{where}.model",
            name,
            exp,
            workdir or os.getcwd(),
            limits.settings(config)["user_code_idle_seconds"],
        )
    exp.setdefault("runs", {"torch": {}, "candle": {}})
    if "comparisons" not in exp:  # PyTorch against the Rust run: candle, else burn
        rust = next((r for r in ("candle", "burn") if r in exp["runs"]), "candle")
        exp["comparisons"] = {MAIN: {"reference": "torch", "candidate": rust}}
    if name in config.get("determinism", {}).get("experiments", []):
        # Each run again as <run>_repeat, compared bit for bit (tolerance 0).
        for run in list(exp["runs"]):
            exp["runs"][f"{run}_repeat"] = copy.deepcopy(exp["runs"][run])
            exp["comparisons"][f"determinism_{run}"] = {
                "reference": run,
                "candidate": f"{run}_repeat",
                "tolerance": 0.0,
            }
    exp["record"] = merge(merge(RECORD_DEFAULTS, config.get("record", {})), exp.get("record", {}))
    check_model(f"{where}.model", exp["model"], exp["loss"])
    runs, problems = {}, []
    for run, override in exp["runs"].items():
        try:
            runs[run] = resolve_run(f"{where}.runs.{run}", exp, run, override or {}, config)
        except ConfigError as e:
            problems.extend(e.problems)
    for cname, comp in exp["comparisons"].items():
        for side in ("reference", "candidate"):
            if comp[side] not in exp["runs"]:
                problems.append(
                    ConfigError(
                        f"{where}.comparisons.{cname}.{side}",
                        f"{comp[side]!r} is not a run of this experiment "
                        f"(runs: {', '.join(exp['runs'])})",
                    )
                )
        comp.setdefault("expect", "pass")
        comp.setdefault("tolerance", float(config["tolerance"]))
    if not problems:
        exp["runs"] = runs
        if exp["model"]["family"] != "own":
            # An own model's runner links the user's crate against the primary release.
            problems.extend(versions.add_release_runs(where, exp, config))
    if problems:
        raise ConfigError.every(problems)
    return exp


def resolve_run(where: str, exp: Mapping, run: str, override: Mapping, config: Mapping) -> dict:
    """The settings of run ``run`` of experiment ``exp`` (its ``model``, ``loss``, ``data``,
    ``steps``, ``optimizer`` and ``record``, already merged from the top level), with the
    run's ``override`` merged over them and its framework's side resolved
    (``frameworks.<name>.resolve_run``). Raises :class:`ConfigError` at ``where``."""
    framework = frameworks.framework_of(run)
    optimizer = merge(exp["optimizer"], override.get("optimizer", {}))
    settings: dict[str, Any] = {
        "framework": framework,
        "model": copy.deepcopy(exp["model"]),
        "loss": exp["loss"],
        "data": copy.deepcopy(exp["data"]),
        "steps": exp["steps"],
        "record": merge(exp["record"], override.get("record", {})),
        "optimizer": optimizer,
    }
    name = optimizer["name"]
    if name in ("adam", "adamw"):
        for k in ("betas", "eps", "weight_decay"):
            if k not in optimizer:
                raise ConfigError(f"{where}.optimizer.{k}", f"{name} needs an explicit {k}")
    check_optimizer(f"{where}.optimizer", optimizer)
    names = [n for n, _ in model_params(exp["model"])]
    loop = resolve_loop(where, exp, override, optimizer, names)
    if loop is not None:
        settings["loop"] = loop
    own_side = exp["model"]["family"] == "own" and framework in own.RUST_SIDES
    if own_side and framework not in exp["model"]:
        raise ConfigError(
            where,
            f"the model has no {framework} port: name its crate in "
            f"model.{framework}.crate (docs/own-model.md)",
        )
    frameworks.definition(framework).resolve_run(where, exp, settings, override, config)
    if own_side and exp["model"][framework].get("unsupported"):
        # dtypes the user's port cannot run in (a fused op without a float64 kernel): no
        # job, a cell listed as unsupported with the user's reason (docs/own-model.md)
        settings["unsupported"] = {
            **settings.get("unsupported", {}),
            **exp["model"][framework]["unsupported"],
        }
    if framework in frameworks.RUST_FRAMEWORKS:
        # The release the run's binary is built from; further releases copy the run
        # (versions.add_release_runs).
        settings["version"] = versions.primary(config, framework)
    elif framework == "torch":
        # The installed PyTorch release: part of the run's hash and its job's params, so a
        # torch upgrade reruns the run and a trace of another torch is refused by name
        # (keys.trace_expectation).
        settings["torch_version"] = versions.torch_version()
    if "fault" in override:
        settings["fault"] = check_fault(f"{where}.fault", exp, settings, override["fault"])
    for t in settings["record"].get("tensors") or ():
        if t not in names:
            raise ConfigError(
                f"{where}.record.tensors", f"{t!r} is not a parameter ({', '.join(names)})"
            )
    return settings


def check_optimizer(where: str, optimizer: Mapping) -> None:
    """What PyTorch's optimizers refuse of their arguments, refused here for every framework:
    Nesterov momentum without momentum or with dampening (``torch.optim.SGD`` raises
    ValueError), SGD-only keys on an Adam and the reverse (the schema's), dampening
    without momentum (it would do nothing). Raises :class:`ConfigError` at ``where``."""
    if optimizer["name"] == "sgd":
        if optimizer.get("nesterov") and (
            optimizer.get("momentum", 0) <= 0 or optimizer.get("dampening", 0) != 0
        ):
            raise ConfigError(
                f"{where}.nesterov", "Nesterov momentum requires a momentum and zero dampening"
            )
        if optimizer.get("dampening", 0) and not optimizer.get("momentum", 0):
            raise ConfigError(f"{where}.dampening", "dampening acts on a momentum: set one")


def check_fault(where: str, exp: Mapping, settings: Mapping, fault: Mapping) -> dict:
    """A run's ``fault`` setting, checked against what the run can have
    (``frameworks.FAULTS`` and what each kind needs of the model, loss and optimizer);
    raises :class:`ConfigError`. A ``skip_update`` step beyond the run's steps is allowed
    and skips nothing, so that a config shortened for a test stays valid (the comparison
    then shows that the fault never fired)."""
    framework, kind = settings["framework"], fault["kind"]
    if kind not in frameworks.FAULTS.get(framework, {}):
        sides = [f for f, kinds in frameworks.FAULTS.items() if kind in kinds]
        raise ConfigError(
            f"{where}.kind",
            f"{kind!r} is a fault of the {'/'.join(sides)} side, not of {framework}"
            + (
                " (candle 0.11.0 already takes relu'(0) = 1)" if kind == "relu_grad_at_zero" else ""
            ),
        )
    opt = settings["optimizer"]
    if candle.needs_manual_adamw(kind) and not (
        opt["name"] == "adamw" and opt.get("implementation") == "manual"
    ):
        raise ConfigError(
            f"{where}.kind",
            f"{kind} is a fault in the AdamW update; it needs optimizer "
            "{name: adamw, implementation: manual}",
        )
    if kind == "mse_sum" and exp["loss"] != "mse":
        raise ConfigError(f"{where}.kind", "mse_sum needs loss mse")
    if kind == "transposed_weight" and not (
        exp["model"]["family"] == "mlp"
        and any(a == b for a, b in itertools.pairwise(exp["model"]["sizes"]))
    ):
        raise ConfigError(
            f"{where}.kind",
            "transposed_weight needs an MLP with a square weight (two equal consecutive sizes)",
        )
    if kind == "relu_grad_at_zero" and exp["model"].get("activation") != "relu":
        raise ConfigError(f"{where}.kind", "relu_grad_at_zero needs a ReLU model")
    return dict(fault)
