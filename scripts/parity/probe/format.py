"""The probe format: small exact checks of single operations, written as data.

A probe is a YAML file ``probes/{name}.yaml`` checked against ``schemas/probe.schema.yaml``
(the one place that lists the ops, their inputs and arguments, with defaults;
docs/probe-reference.md is generated from it). It names:

* *inputs*: tensors built from float64 values (explicit ``values``, ``arange`` with
  ``start``/``scale`` and ``shape``, ``ones``, ``zeros``), rounded once to the run's dtype,
  or int64 values (``dtype: int64``: indices, class targets); ``requires_grad: true`` marks
  a leaf whose gradient may be compared; values may be non-finite (``.inf``, ``-.inf``,
  ``.nan`` or the strings ``"inf"``, ``"-inf"``, ``"nan"``);
* *cases*: each a list of *steps* (layout changes such as ``transpose``, ``narrow``,
  ``broadcast_to``, ``contiguous``, and operations such as ``conv1d``), an optional scalar
  *loss* (terms ``sum``, ``sum_squares``, ``weighted_sum`` added in order), an optional
  *optimizer* (``sgd``, ``adam``, ``adamw``) run for ``steps`` iterations (each of
  ``accumulate`` forward and backward passes, rows of ``micro_batches``, and the ``grad``
  transforms of the summed gradient before the step), and the
  *quantities* to compare: ``loss``, a tensor name (its forward values, flattened in
  row-major order), ``<input>.grad``, ``<input>.after_step``, and the optimizer's state
  ``<input>.exp_avg``, ``.exp_avg_sq``, ``.momentum_buffer``; with ``expect: error`` the
  steps are invalid and every framework must refuse them;
* optionally per case the ``exact`` values of quantities (then they are the reference for
  every framework), the values a ``known_bug`` produces (framework → device →
  quantity → values) and its own ``tolerance``.

``loader.load`` validates a file and *normalizes* it (``normalize``): every value explicit
(inputs expanded to flat float64 lists with their shape and dtype, op arguments with their
defaults, pairs as ``[h, w]``, the loss as a list of terms, the optimizer with every
hyperparameter and ``optimizer_steps``), names checked, and every shape inferred
(``probe_shapes``): a step that cannot run is refused at load, naming it, unless the case
expects an error. Every interpreter reads the normalized form: PyTorch in ``probe_torch``,
candle and burn in ``rust/{candle,burn}-parity/src/probe/`` through
:meth:`Probe.runner_spec` (the Rust side, ``parity_common::probe_spec``, refuses unknown
fields).

This module holds the format's vocabulary (dtypes, quantity suffixes, what a case expects),
its error (:class:`ProbeError`) and the normalized :class:`Probe` every framework gets;
reading and validating a file is ``parity.probe.loader``, normalizing it
``parity.probe.normalize``, which probe jobs run :mod:`parity.probe.plan`. Pure Python.
"""

from __future__ import annotations

import copy
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from parity.core.config import canonical_hash
from parity.probe.shapes import table as probe_shapes

NAME = re.compile(r"^[a-z][a-z0-9_]*\Z")
#: The dtypes a probe runs in (the training dtypes plus the half-precision ones).
PROBE_DTYPES = ("f32", "f64", "f16", "bf16")
#: Quantity suffixes: the gradient of an input, its value after the optimizer step, and the
#: optimizer's state of it (Adam/AdamW moments, the SGD momentum buffer).
GRAD, AFTER_STEP = "grad", "after_step"
EXP_AVG, EXP_AVG_SQ, MOMENTUM_BUFFER = "exp_avg", "exp_avg_sq", "momentum_buffer"
SUFFIXES = (GRAD, AFTER_STEP, EXP_AVG, EXP_AVG_SQ, MOMENTUM_BUFFER)
LOSS = "loss"
#: What a case expects: values from every framework, or an error from every one.
VALUES, ERROR = "values", "error"
#: Non-finite values as the runners' JSON writes them (``"inf"``, ``"-inf"``, ``"nan"``).
NON_FINITE_TEXT = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}


class ProbeError(ValueError):
    """A probe file that cannot run; the message names the file and the field."""

    def __init__(self, path: str | Path, field: str, problem: str):
        where = f"{path}: {field}" if field else str(path)
        super().__init__(f"{where}: {problem}")
        self.path = str(path)
        self.field = field
        self.problem = problem


def parse_quantity(q: str) -> tuple[str, str | None]:
    """Split a quantity: ``"w.grad"`` → ``("w", "grad")``, ``"y"`` → ``("y", None)``."""
    name, _, suffix = q.partition(".")
    return name, suffix or None


def _runner_value(v: float) -> float | str:
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return v


@dataclass(frozen=True)
class Probe:
    """A validated, normalized probe file."""

    name: str
    #: Normalized form: probe, description, tolerance {f32, f64, f16, bf16}, inputs (list),
    #: cases (list; each with expect and its resolved tolerance).
    spec: dict
    #: The file it was read from ("" when rebuilt from a job's params).
    path: str = ""

    @property
    def hash(self) -> str:
        """Canonical hash of the normalized probe (comments and layout do not count)."""
        return canonical_hash(self.spec)

    @property
    def cases(self) -> list[dict]:
        """The normalized cases, in file order."""
        return self.spec["cases"]

    def case(self, name: str) -> dict:
        """One normalized case. Raises ``KeyError`` if none has this name."""
        for c in self.cases:
            if c["name"] == name:
                return c
        raise KeyError(f"probe {self.name} has no case {name!r}")

    def quantities(self) -> list[tuple[str, str]]:
        """Every (case, quantity) a run reports, in table order."""
        return [(c["name"], q) for c in self.cases for q in c["compare"]]

    def quantity_shapes(self, case: str | Mapping) -> dict[str, tuple[list[int], str]]:
        """Quantity → (shape, kind ``"float"``/``"int64"``) of a case (its name or its
        normalized dict), as ``probe_shapes.infer_case`` infers them (``[n, ...]`` with n
        optimizer steps > 1). Raises ``CaseShapeError`` for a case that
        expects an error."""
        c = self.case(case) if isinstance(case, str) else case
        return probe_shapes.infer_case(self.spec["inputs"], c)

    def tolerance(self, dtype: str) -> float:
        """The probe's relative tolerance in ``dtype`` (0: exact); a quantity's absolute
        tolerance is ``closeness.scaled_tolerance`` of it."""
        return float(self.spec["tolerance"][dtype])

    def case_tolerance(self, case: str | Mapping, dtype: str) -> float:
        """The relative tolerance of one case (its name or its normalized dict) in
        ``dtype``: the case's own ``tolerance`` where it gives one for ``dtype``, else the
        probe's."""
        c = self.case(case) if isinstance(case, str) else case
        return float(c.get("tolerance", self.spec["tolerance"])[dtype])

    def as_params(self) -> dict:
        """Plain data for a job's ``params``: ``Probe(**probe.as_params())`` rebuilds it."""
        return {"name": self.name, "spec": self.spec}

    def runner_spec(self, dtype: str, device: str) -> dict:
        """The JSON a Rust runner reads (``parity_common::probe_spec::ProbeSpec``): inputs
        (non-finite values as ``"inf"``, ``"-inf"``, ``"nan"``) and per case ``name``,
        ``steps``, ``loss``, ``optimizer``, ``optimizer_steps``, ``accumulate``,
        ``micro_batches``, ``grad_transforms`` (their defaults for a case built without
        them), ``compare``.

        Only what the computation needs: reference values, known bugs, notes, ``expect``
        and tolerances stay here.
        """
        inputs = copy.deepcopy(self.spec["inputs"])
        for i in inputs:
            i["values"] = [_runner_value(v) for v in i["values"]]
        keys = ("name", "steps", "loss", "optimizer", "optimizer_steps", "compare")
        loop = {"accumulate": 1, "micro_batches": [], "grad_transforms": []}
        return {
            "probe": self.name,
            "dtype": dtype,
            "device": device,
            "inputs": inputs,
            "cases": [
                {
                    **{k: copy.deepcopy(c[k]) for k in keys},
                    **{k: copy.deepcopy(c.get(k, v)) for k, v in loop.items()},
                }
                for c in self.cases
            ],
        }
