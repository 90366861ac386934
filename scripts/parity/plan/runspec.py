"""The JSON run spec a Rust runner reads (``parity_common::spec::RunSpec``).

Every field is explicit; the Rust side refuses unknown fields, and the port it builds asks
for exactly the spec's parameters by name (a port that asks for another or leaves one out
is refused). Pure Python: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from parity.core.models import model_params
from parity.plan.keys import RunKey

#: What a Rust runner is told when a run has no fault (the spec field is always explicit).
NO_FAULT = {"kind": "none"}


def runner_spec(key: RunKey, settings: Mapping[str, Any], fixture: str) -> dict:
    """The run spec of run ``key`` with its resolved ``settings`` (``resolve.resolve_run``),
    reading ``fixture`` (a safetensors path)."""
    opt = settings["optimizer"]
    if opt["name"] == "sgd":
        optimizer = {
            "name": "sgd",
            "lr": opt["lr"],
            "momentum": opt.get("momentum", 0.0),
            "dampening": opt.get("dampening", 0.0),
            "nesterov": bool(opt.get("nesterov", False)),
            "weight_decay": opt.get("weight_decay", 0.0),
        }
    else:
        optimizer = {
            "name": opt["name"],
            "lr": opt["lr"],
            "betas": list(opt["betas"]),
            "eps": opt["eps"],
            "weight_decay": opt["weight_decay"],
            "amsgrad": bool(opt.get("amsgrad", False)),
            "implementation": opt["implementation"],
            "bias_correction": opt["bias_correction"],
        }
    if settings["model"]["family"] == "own":
        model = own_model(settings["model"], settings["framework"])
    else:
        model = family_model(settings["model"], settings["loss"])
    record = settings["record"]
    return {
        "experiment": key.experiment,
        "run": key.run,
        "fixture": fixture,
        "dtype": key.dtype,
        "device": key.device,
        "steps": settings["steps"],
        "model": model,
        "loss": settings["loss"],
        "optimizer": optimizer,
        "record": {
            "every": record["every"],
            "tensors": record.get("tensors"),
            "grads": bool(record.get("grads", False)),
            "moments": bool(record.get("moments", False)),
        },
        "params": [{"name": n, "shape": list(sh)} for n, sh in model_params(settings["model"])],
        "fault": dict(settings.get("fault", NO_FAULT)),
        "loop": loop_spec(settings.get("loop")),
    }


def loop_spec(loop: Mapping[str, Any] | None) -> dict | None:
    """The run spec's ``loop`` (``parity_common::spec::Loop``) of a run's resolved loop
    (``parity.plan.loop``), or None without one: the schedule (every argument explicit,
    ``order``), the clipping, the parameter groups (each with its parameters by state_dict
    key, its ``lr`` and ``weight_decay``) and the accumulation."""
    if loop is None:
        return None
    schedule = loop["schedule"]
    return {
        "schedule": schedule
        and {
            "order": schedule["order"],
            "kind": {k: v for k, v in schedule.items() if k != "order"},
        },
        "clip": loop["clip"],
        "groups": loop["param_groups"],
        "accumulate": loop["accumulate"],
    }


def family_model(model: Mapping[str, Any], loss: str) -> dict:
    """The ``model`` of a built-in family's run spec (``parity_common::spec::ModelSpec``):
    the family's name, its settings as the port's ``config`` (``sizes``, ``conv_impl``, …;
    ``fc_in``, a check of the config's, and ``attention``, PyTorch's choice, are left out),
    its data (token ids and next tokens for the transformer, else floats with float targets
    under the MSE and class labels under the cross-entropy), and no tied parameters,
    buffers or renames."""
    config = {k: v for k, v in model.items() if k not in ("family", "fc_in", "attention")}
    tokens = model["family"] == "transformer"
    target = "tokens" if tokens else "float" if loss == "mse" else "classes"
    return {
        "family": model["family"],
        "config": config,
        "input": "tokens" if tokens else "float",
        "target": target,
        "tied": {},
        "buffers": [],
        "rename": {},
    }


def own_model(model: Mapping[str, Any], framework: str) -> dict:
    """The ``model`` of an own model's run spec (``parity_common::spec::ModelSpec``): the
    port (``own``, the user's crate linked into its runner, or the runner crate's built-in
    port the side names, ``family``), what the port's ``build`` receives (``config``), what
    a sample's input and target are (``input``: ``tokens`` or ``float``; ``target``:
    ``tokens``, ``classes`` or ``float``), the tied parameters (alias → recorded name), the
    buffers the fixture hands over (name, shape), and the rename table of this Rust side
    (Rust name → state_dict key)."""
    io = model["io"]
    return {
        "family": model.get(framework, {}).get("family", "own"),
        "config": model["rust_config"],
        "input": io["input"]["kind"],
        "target": io["target"]["kind"],
        "tied": dict(model["tied"]),
        "buffers": [{"name": n, "shape": list(s)} for n, s in model["buffers"].items()],
        "rename": dict(model["rename"].get(framework) or {}),
    }
