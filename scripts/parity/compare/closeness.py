"""Closeness: how far apart two sets of values are, and whether that is close enough.

The one place for it, as ``torch/testing/_comparison.py`` is for PyTorch: the traces
(``compare``), the probes and the localisation all measure a difference with
:func:`max_abs_diff`, hold it to a tolerance with :func:`within`, and describe a mismatch
with :func:`mismatch_message` (:func:`difference_message` without the element counts). How
a verdict is reached from them is ``judgement``.

**The difference.** Values are flat arrays of any float dtype, compared in float64 (a
float32 value widens exactly, and the difference of two float32 values is exact in
float64). Per element, |a − b| under one rule for NaN and ±Inf:

* equal values count 0, equal infinities included (+Inf against +Inf);
* NaN against NaN at the same position counts 0: both sides diverged there alike;
* a NaN or an Inf against anything else (a finite value, the other infinity, a NaN against
  an Inf) counts ``+inf``, so it exceeds every tolerance (:func:`within`), sorts as the
  worst difference, and tables show ``inf``;
* finite values count |a − b| (which is ``+inf`` only if it overflows float64).

No difference is ever NaN. A run that diverged is told by its trace's status
(``reader.TraceReader.diverged_step``), not by a NaN difference. The worst difference is
reported with its location, ``name[flat index]`` in PyTorch layout (``fc.weight[67]`` is
``fc.weight[1, 19]`` for a ``[3, 48]`` weight); ties go to the first name in the order
given, then the lowest index, so all-zero differences point at the first element.

**The tolerance.** A difference passes when :func:`within` its absolute tolerance: at most
the tolerance, never when NaN or ``+inf``. Probes state a relative tolerance per dtype
that :func:`scaled_tolerance` turns into an absolute one.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class MaxDiff:
    """The largest absolute difference between two sets of tensors, and where it is."""

    value: float
    name: str
    index: int

    @property
    def where(self) -> str:
        """``name[flat index]`` in PyTorch layout."""
        return f"{self.name}[{self.index}]"


def _flat_pair(a: Mapping, b: Mapping, name: str) -> tuple[np.ndarray, np.ndarray]:
    x, y = np.asarray(a[name]).reshape(-1), np.asarray(b[name]).reshape(-1)
    if x.size != y.size:
        raise ValueError(f"{name}: {x.size} values against {y.size}")
    return x, y


def _differences(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, int]:
    """(|x − y| per element under the module's rule, in a new float64 array; the first
    position of its largest value). ``x`` and ``y`` are flat, of equal non-zero size.

    All-finite values cost one float64 buffer and three passes (subtract with the cast,
    abs, argmax). Only when the largest difference is NaN or Inf, i.e. a NaN or an Inf is
    in the data, are the non-finite positions settled by the rule and the max found again.
    """
    with np.errstate(invalid="ignore", over="ignore"):  # Inf − Inf; an f64 overflow
        d = np.subtract(x, y, dtype=np.float64)
    np.abs(d, out=d)
    i = int(np.argmax(d))  # the first NaN when there is one
    if math.isfinite(d[i]):
        return d, i
    same = (x == y) | (np.isnan(x) & np.isnan(y))
    d[same] = 0.0  # equal infinities (whose difference is NaN) and NaN against NaN
    d[np.isnan(d)] = math.inf  # a NaN against anything else
    return d, int(np.argmax(d))


#: Values per block of :func:`_largest`: 64Ki float64 differences (512 KiB) stay in a
#: core's L2 cache between the subtraction, the absolute value and the arg max.
BLOCK = 1 << 16


def _largest(x: np.ndarray, y: np.ndarray) -> tuple[float, int]:
    """(the largest |x − y| under the module's rule, its first position), as
    :func:`_differences` would give them, without its whole-size buffer: computed a
    :data:`BLOCK` at a time in one reused float64 buffer, so each value is read from memory
    once (measured on the scale traces' float64 split: bench/compare_throughput.py).
    ``x`` and ``y`` are flat, of equal non-zero size. Stops at the first ``+inf``."""
    best, at = -1.0, 0
    buffer = np.empty(min(BLOCK, x.size), np.float64)
    for lo in range(0, x.size, BLOCK):
        xs, ys = x[lo : lo + BLOCK], y[lo : lo + BLOCK]
        d = buffer[: xs.size]
        with np.errstate(invalid="ignore", over="ignore"):  # Inf − Inf; an f64 overflow
            np.subtract(xs, ys, out=d, dtype=np.float64)
        np.abs(d, out=d)
        i = int(np.argmax(d))  # the first NaN when there is one
        if not math.isfinite(d[i]):
            same = (xs == ys) | (np.isnan(xs) & np.isnan(ys))
            d[same] = 0.0  # equal infinities (whose difference is NaN) and NaN against NaN
            d[np.isnan(d)] = math.inf  # a NaN against anything else
            i = int(np.argmax(d))
        if d[i] > best:
            best, at = float(d[i]), lo + i
            if best == math.inf:
                break
    return best, at


def max_abs_diff(
    a: Mapping[str, np.ndarray], b: Mapping[str, np.ndarray], names: Sequence[str]
) -> MaxDiff:
    """max over ``names`` and their elements of |a − b| under the module's NaN/Inf rule,
    computed in float64, with its location.

    ``a[name]`` and ``b[name]`` are arrays of any float dtype and of equal size, read flat
    (row-major); ``names`` is not empty. The value is never NaN; the first ``+inf`` (in
    ``names`` order, then by index) is reported as soon as it is found. Empty arrays count
    0. Raises ``ValueError`` when the sizes of a name differ.
    """
    best = MaxDiff(0.0, names[0], 0)
    for name in names:
        x, y = _flat_pair(a, b, name)
        if x.size == 0:
            continue
        value, i = _largest(x, y)
        if value > best.value:
            best = MaxDiff(value, name, i)
            if best.value == math.inf:
                return best
    return best


def abs_diff(a: float, b: float) -> float:
    """|a − b| of two scalars (e.g. two losses) under the same rule as :func:`max_abs_diff`."""
    x, y = np.array([a], np.float64), np.array([b], np.float64)
    return max_abs_diff({"": x}, {"": y}, [""]).value


def within(diff: float, tolerance: float) -> bool:
    """Whether a difference is at most ``tolerance`` (absolute; 0 demands equality).

    NaN is never within, nor is ``+inf`` (a NaN or an Inf against a different value),
    whatever the tolerance."""
    return bool(diff <= tolerance and diff != math.inf)


def scaled_tolerance(tolerance: float, reference: np.ndarray) -> float:
    """The absolute tolerance of a probe quantity: the probe's relative ``tolerance`` times
    the largest finite magnitude of its ``reference`` values (a float array), at least 1.

    So a float32 tolerance of 1e-6 is about eight ulps of the quantity's largest value,
    and absolute below magnitude 1; a reference without finite values counts magnitude 1.
    """
    finite = np.abs(reference[np.isfinite(reference)])
    return tolerance * max(1.0, float(finite.max()) if finite.size else 1.0)


def _number(v: float) -> str:
    return f"{v:.6g}"


def difference_message(worst: float, where: str, tolerance: float) -> str:
    """The one description of a difference held to a tolerance, after
    ``torch.testing.assert_close``'s: ``greatest absolute difference: 152 at w.grad[5] (up
    to 0.000652 allowed)`` (``worst`` and ``tolerance`` absolute, ``where`` as
    :attr:`MaxDiff.where`)."""
    return (
        f"greatest absolute difference: {_number(worst)} at {where} "
        f"(up to {_number(tolerance)} allowed)"
    )


@dataclass(frozen=True)
class Mismatch:
    """How two sets of values differ under a tolerance: ``mismatched`` of ``total``
    elements are not :func:`within` it; ``worst`` is the :func:`max_abs_diff`."""

    mismatched: int
    total: int
    worst: MaxDiff
    tolerance: float

    @property
    def message(self) -> str:
        """One line, after ``torch.testing.assert_close``'s: ``mismatched elements: 2 / 6
        (33.3%), greatest absolute difference: 152 at w.grad[5] (up to 0.000652 allowed)``."""
        share = 100.0 * self.mismatched / self.total if self.total else 0.0
        return (
            f"mismatched elements: {self.mismatched} / {self.total} ({share:.1f}%), "
            + difference_message(self.worst.value, self.worst.where, self.tolerance)
        )


def mismatch(
    a: Mapping[str, np.ndarray],
    b: Mapping[str, np.ndarray],
    names: Sequence[str],
    tolerance: float,
) -> Mismatch:
    """Count the elements of ``names`` whose difference is not :func:`within`
    ``tolerance``, and find the worst (arguments and ``ValueError`` as for
    :func:`max_abs_diff`). A pass over every element: for describing a mismatch, not for
    deciding one."""
    count = total = 0
    for name in names:
        x, y = _flat_pair(a, b, name)
        if x.size == 0:
            continue
        d, _ = _differences(x, y)
        total += d.size
        count += int(np.count_nonzero(~(d <= tolerance) | (d == math.inf)))
    return Mismatch(count, total, max_abs_diff(a, b, names), tolerance)


def mismatch_message(
    a: Mapping[str, np.ndarray],
    b: Mapping[str, np.ndarray],
    names: Sequence[str],
    tolerance: float,
) -> str:
    """:attr:`Mismatch.message` of :func:`mismatch`."""
    return mismatch(a, b, names, tolerance).message


def fp64_rule_multiplier(numel: int, setting: float | str) -> float:
    """The multiplier of the fp64-referenced rule for a float32 tensor of ``numel``
    elements: ``auto`` is TorchDynamo's choice for float32 (3.0 below 1000 elements, where
    noise dominates, else 2.0); a number is used as given."""
    if setting == "auto":
        return 3.0 if numel < 1000 else 2.0
    return float(setting)
