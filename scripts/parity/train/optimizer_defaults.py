"""Optimizer defaults, read from each framework by running it (never typed in).

The table has one row per (framework, optimizer) with the hyperparameters users compare
(lr, betas, eps, weight_decay, momentum) and the remaining settings as JSON. Each
framework's rows are kept as sealed JSON (:func:`write`, :func:`read`) that the table and
the report's training-loop page read.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping, Sequence

import numpy as np

from parity.core import integrity

COLUMNS = (
    "framework",
    "version",
    "optimizer",
    "lr",
    "betas",
    "eps",
    "weight_decay",
    "momentum",
    "other",
    "source",
)
MAIN_KEYS = ("lr", "betas", "eps", "weight_decay", "momentum")


def _row(framework, version, optimizer, values: dict, source: str) -> dict:
    row = {
        "framework": framework,
        "version": version,
        "optimizer": optimizer,
        "source": source,
    }
    for k in MAIN_KEYS:
        v = values.get(k, "")
        row[k] = json.dumps(list(v)) if isinstance(v, tuple | list) else ("" if v is None else v)
    other = {k: v for k, v in values.items() if k not in MAIN_KEYS}
    row["other"] = json.dumps(other, sort_keys=True) if other else ""
    return row


def torch_defaults() -> list[dict]:
    """``torch.optim.{SGD, Adam, AdamW}([p]).defaults`` of the installed torch."""
    import torch

    p = [torch.nn.Parameter(torch.zeros(1))]
    rows = []
    for name in ("SGD", "Adam", "AdamW"):
        opt = getattr(torch.optim, name)(p)
        rows.append(
            _row(
                "torch", torch.__version__, name, dict(opt.defaults), f"torch.optim.{name}(params)"
            )
        )
    return rows


def candle_defaults(binary: str, build: Mapping[str, str] | None = None) -> list[dict]:
    """What ``candle-parity defaults`` prints: candle-nn's ``ParamsAdamW::default()`` and
    SGD's required learning rate. Raises ``subprocess.CalledProcessError`` on failure,
    ``integrity.BinaryError`` for a binary that is not its build's or, with ``build`` (the
    binary's name and source id as this checkout and config build it), not that build's."""
    integrity.check_binary(binary, build)
    out = json.loads(subprocess.run([binary, "defaults"], check=True, capture_output=True).stdout)
    version = out["candle_version"]
    a = out["AdamW"]
    adamw = {
        "lr": a["lr"],
        "betas": [a["beta1"], a["beta2"]],
        "eps": a["eps"],
        "weight_decay": a["weight_decay"],
    }
    s = out["SGD"]
    sgd = {"lr": "required (no default)" if s["lr"] is None else s["lr"], "note": s["note"]}
    return [
        _row("candle", version, "SGD", sgd, s["source"]),
        _row("candle", version, "AdamW", adamw, a["source"]),
    ]


def burn_defaults(binary: str, build: Mapping[str, str] | None = None) -> list[dict]:
    """What ``burn-parity defaults`` prints: burn-optim's ``AdamConfig::new()``,
    ``AdamWConfig::new()`` and ``SgdConfig::new()`` serialised by burn itself; the Adams' fields
    are float32 (``float_type``) and are written in their shortest float32 spelling (0.9, not the
    widened 0.8999999761581421). No burn config holds a learning rate (it is an
    argument of ``ModuleOptimizer::step``); a disabled option (``None`` in burn) reads
    ``none``. Raises ``subprocess.CalledProcessError`` on failure, ``integrity.BinaryError``
    for a binary that is not its build's or, with ``build``, not that build's."""
    integrity.check_binary(binary, build)
    out = json.loads(subprocess.run([binary, "defaults"], check=True, capture_output=True).stdout)
    version = out["burn_version"]

    def none(v):
        return "none" if v is None else v

    def f32(v):
        return float(str(np.float32(v))) if isinstance(v, float) else v

    rows = []
    for name in ("SGD", "Adam", "AdamW"):
        c = dict(out[name]["config"])
        values = {"lr": "required (no default)", "note": out["lr"]}
        if name == "SGD":
            values["momentum"] = none(c.pop("momentum"))
            values["weight_decay"] = none(c.pop("weight_decay"))
            c["momentum_config_when_enabled"] = out[name]["momentum_config"]
        else:
            values["betas"] = [c.pop("beta_1"), c.pop("beta_2")]
            values["eps"] = c.pop("epsilon")
            wd = c.pop("weight_decay")
            values["weight_decay"] = wd["penalty"] if isinstance(wd, dict) else none(wd)
            values["betas"] = [f32(b) for b in values["betas"]]
            values["eps"] = f32(values["eps"])
            values["weight_decay"] = f32(values["weight_decay"])
            values["float_type"] = "f32"  # of beta_1, beta_2, epsilon and the weight decay
        values.update(c)
        rows.append(_row("burn", version, name, values, out[name]["source"]))
    return rows


def merge(parts: Sequence[Sequence[dict]]) -> list[dict]:
    """Rows of several frameworks, in order."""
    return [r for part in parts for r in part]


def write(path: str, rows: Sequence[dict]) -> None:
    """One framework's rows as sealed JSON (``integrity.write_sealed_json``)."""
    integrity.write_sealed_json(path, {"rows": list(rows)})


def read(paths: Sequence[str]) -> list[dict]:
    """The rows :func:`write` wrote to each of ``paths``, seals checked, merged in order."""
    return merge([integrity.read_sealed_json(p)["rows"] for p in paths])
