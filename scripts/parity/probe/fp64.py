"""The float64-referenced rule of the probes (after ``same()`` in torch/_dynamo/utils.py):
an f32, f16 or bf16 value passes when it is as close to PyTorch float64 as PyTorch in its
own dtype is, within a multiplier and a floor of ulps (:func:`fp64_check`), and the ulp of
each run dtype (:func:`ulp`). Differences are ``closeness``'s; the judging that applies
the rule is ``parity.probe.judge``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace

import numpy as np

from parity.compare import closeness
from parity.probe.plan import FP64_RULE_DEFAULTS

#: Stored significand bits of each run dtype: the ulp of 1 is 2^-bits.
SIGNIFICAND_BITS = {"f64": 52, "f32": 23, "f16": 10, "bf16": 7}
#: Run dtypes the float64-referenced rule judges (against PyTorch in the same dtype).
FP64_RULE_DTYPES = ("f32", "f16", "bf16")
#: Half precision: exact values are judged through the float64-referenced rule there.
HALF_DTYPES = ("f16", "bf16")


def ulp(dtype: str, magnitude: float) -> float:
    """The spacing of ``dtype``'s values at ``magnitude`` (``np.spacing``), for a positive
    finite magnitude at which the dtype is normal (here: at least 1): 2^(e − bits) for
    2^e ≤ magnitude < 2^(e+1), ``bits`` from :data:`SIGNIFICAND_BITS`. A formula because
    NumPy has no bfloat16; equal to ``np.spacing`` of f16, f32 and f64 normal values.
    Raises ``KeyError`` for another dtype."""
    _, e = math.frexp(magnitude)  # magnitude = m · 2^e with 0.5 ≤ m < 1
    return math.ldexp(1.0, e - 1 - SIGNIFICAND_BITS[dtype])


def max_diff(quantity: str, values: np.ndarray, reference: np.ndarray) -> float:
    """``closeness.max_abs_diff`` of one quantity's values (a flat float array) against a
    reference of any size: NaN (never within a tolerance) when their counts differ, as
    arrays of different sizes have no difference."""
    if values.size != reference.size:
        return math.nan
    return closeness.max_abs_diff({quantity: values}, {quantity: reference}, [quantity]).value


def _g(v: float) -> str:
    return f"{v:.3g}"


@dataclass(frozen=True)
class Fp64Check:
    """The float64-referenced rule on one quantity: ``fp64_diff`` = max|values − torch
    f64|, ``reference_fp64_diff`` = max|torch in the run dtype − torch f64| (both
    ``closeness.max_abs_diff``), ``bound`` = multiplier · reference_fp64_diff + floor."""

    passed: bool
    fp64_diff: float
    reference_fp64_diff: float
    multiplier: float
    floor: float

    @property
    def bound(self) -> float:
        """The largest ``fp64_diff`` that passes."""
        return self.multiplier * self.reference_fp64_diff + self.floor

    def describe(self, label: str, reference: str, reference64: str) -> str:
        """``max|candle f32 cpu − torch f64 cpu| = 4.9e-07 ≤ 3 × max|torch f32 cpu −
        torch f64 cpu| (6.25e-07) + 1.19e-07``."""
        op = "≤" if self.passed else ">"
        return (
            f"max|{label} − {reference64}| = {_g(self.fp64_diff)} {op} "
            f"{_g(self.multiplier)} × max|{reference} − {reference64}| "
            f"({_g(self.reference_fp64_diff)}) + {_g(self.floor)}"
        )


def fp64_check(
    quantity: str,
    values: np.ndarray,
    reference: np.ndarray,
    reference64: np.ndarray,
    dtype: str,
    rule: Mapping | None = None,
) -> Fp64Check | None:
    """The float64-referenced rule (after ``same()`` in torch/_dynamo/utils.py): values of
    run dtype ``dtype`` (f32, f16, bf16) pass when max|values − reference64| ≤ m ·
    max|reference − reference64| + floor, where ``reference`` is PyTorch in ``dtype``,
    ``reference64`` PyTorch in float64 (flat float64 arrays of the values' size), m =
    ``closeness.fp64_rule_multiplier(values.size, rule["multiplier"])`` and floor =
    ``rule["floor_ulps"]`` × :func:`ulp` of ``dtype`` at the largest finite
    |reference64| (at least 1). ``rule`` defaults to :data:`FP64_RULE_DEFAULTS`.

    None when the rule does not apply: sizes that differ, or ``reference`` non-finite where
    ``reference64`` is not (the bound would be infinite)."""
    rule = {**FP64_RULE_DEFAULTS, **(rule or {})}
    if not values.size == reference.size == reference64.size:
        return None
    ref_err = max_diff(quantity, reference, reference64)
    if not math.isfinite(ref_err):
        return None
    cand_err = max_diff(quantity, values, reference64)
    finite = np.abs(reference64[np.isfinite(reference64)])
    magnitude = max(1.0, float(finite.max()) if finite.size else 1.0)
    floor = float(rule["floor_ulps"]) * ulp(dtype, magnitude)
    m = closeness.fp64_rule_multiplier(values.size, rule["multiplier"])
    check = Fp64Check(False, cand_err, ref_err, m, floor)
    return replace(check, passed=closeness.within(cand_err, check.bound))
