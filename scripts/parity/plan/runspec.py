"""The JSON run spec a Rust runner reads (``parity_common::spec::RunSpec``).

Every field is explicit; the Rust side refuses unknown fields and checks the parameter list
against its model's (``RunSpec::check``). Pure Python: no I/O.
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
        optimizer = {"name": "sgd", "lr": opt["lr"]}
    else:
        optimizer = {
            "name": opt["name"],
            "lr": opt["lr"],
            "betas": list(opt["betas"]),
            "eps": opt["eps"],
            "weight_decay": opt["weight_decay"],
        }
        if opt["name"] == "adamw":  # Adam is burn's only; candle refuses it
            optimizer["implementation"] = opt["implementation"]
            optimizer["bias_correction"] = opt["bias_correction"]
    model = dict(settings["model"])
    model.pop("fc_in", None)
    model.pop("attention", None)  # PyTorch's choice; the Rust runners have one path
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
    }
