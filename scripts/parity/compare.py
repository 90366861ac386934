"""The comparison maths, in one place. Every table is a view of these functions.

Differences are taken in float64: a float32 value widens to float64 exactly, and the
difference of two float32 values is exact in float64, so a reported difference is the true
distance between the two runs' values, not a rounded one.

Locations are reported in PyTorch layout as ``name[flat index]`` (``fc.weight[67]`` is
``fc.weight[1, 19]`` for a ``[3, 48]`` weight). Ties go to the first parameter in state_dict
order, then the lowest index, so a table of zeros points at ``fc1.weight[0]`` as the study's
does.

The comparisons stream: traces are read a row group at a time
(``schema.TraceReader.iter_steps``), so memory stays bounded by a few steps of data.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from .schema import StepRecord, TraceReader


class ComparisonError(ValueError):
    """Traces that cannot be compared (different parameters, steps or fixtures)."""


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


def max_abs_diff(
    a: Mapping[str, np.ndarray], b: Mapping[str, np.ndarray], names: Sequence[str]
) -> MaxDiff:
    """max over ``names`` and elements of |a − b|, computed in float64.

    Arrays are flat and of equal size per name (any float dtype). A NaN difference (a NaN
    or an Inf on either side) wins and is reported as NaN at its first position.
    Raises ``ValueError`` on a size mismatch.
    """
    best = MaxDiff(0.0, names[0], 0)
    for name in names:
        x = np.asarray(a[name], dtype=np.float64)
        y = np.asarray(b[name], dtype=np.float64)
        if x.shape != y.shape:
            raise ValueError(f"{name}: shapes {x.shape} and {y.shape} differ")
        if x.size == 0:
            continue
        d = np.abs(x - y)
        nan = np.isnan(d)
        if nan.any():
            return MaxDiff(math.nan, name, int(np.argmax(nan)))
        i = int(np.argmax(d))
        if d[i] > best.value:
            best = MaxDiff(float(d[i]), name, i)
    return best


def bitwise_equal(a: Mapping[str, np.ndarray], b: Mapping[str, np.ndarray], names) -> bool:
    """Whether every tensor is identical bit for bit (same dtype, same bytes).

    Tensors of different dtypes (an f32 run against an f64 run) are equal when the float32
    values widen exactly to the float64 ones.
    """
    for n in names:
        x, y = np.asarray(a[n]), np.asarray(b[n])
        if x.dtype == y.dtype:
            if x.tobytes() != y.tobytes():
                return False
        elif not np.array_equal(x.astype(np.float64), y.astype(np.float64)):
            return False
    return True


def check_comparable(readers: Sequence[TraceReader], fixture_sha256: str | None = None) -> None:
    """Refuse traces that do not describe the same experiment on the same data.

    They must hold the same parameters with the same shapes, record the same steps, and
    come from the same fixture (and from ``fixture_sha256``, the current fixture, if given).
    Raises :class:`ComparisonError` naming both files.
    """
    first = readers[0]
    for r in readers[1:]:
        pair = f"{first.path} and {r.path}"
        if first.meta["experiment"] != r.meta["experiment"]:
            raise ComparisonError(
                f"{pair} are from different experiments "
                f"({first.meta['experiment']!r}, {r.meta['experiment']!r})"
            )
        if first.layout.params != r.layout.params:
            raise ComparisonError(f"{pair} hold different parameters or shapes")
        if first.steps != r.steps:
            raise ComparisonError(f"{pair} record different steps")
        if first.meta["fixture_sha256"] != r.meta["fixture_sha256"]:
            raise ComparisonError(f"{pair} were made from different fixtures (sha256 differs)")
    if fixture_sha256 is not None:
        for r in readers:
            if r.meta["fixture_sha256"] != fixture_sha256:
                raise ComparisonError(
                    f"{r.path} was made from another fixture than the current one "
                    f"(sha256 {r.meta['fixture_sha256'][:12]}… vs {fixture_sha256[:12]}…); rerun it"
                )


def aligned(readers: Sequence[TraceReader]) -> Iterator[tuple[StepRecord, ...]]:
    """Yield one record per trace for each recorded step, streaming all traces together."""
    iters = [r.iter_steps() for r in readers]
    for records in zip(*iters, strict=True):
        steps = {rec.step for rec in records}
        if len(steps) != 1:
            raise ComparisonError(f"traces are out of step: {sorted(steps)}")
        yield records


def _dloss(a: float | None, b: float | None) -> float | None:
    if a is None or b is None:
        return None
    return abs(a - b)


@dataclass
class PerStep:
    """The per-step table of a reference/candidate pair, and its step-0 check."""

    rows: list[dict]
    step0_identical: bool


def perstep(reference: TraceReader, candidate: TraceReader) -> PerStep:
    """Per recorded step: ``step, loss_a, loss_b, dloss, max_dparam, where``.

    ``loss_a``/``loss_b`` are the reference's and candidate's losses (None at step 0),
    ``dloss`` = |loss_a − loss_b|, ``max_dparam`` and ``where`` from :func:`max_abs_diff`
    over every parameter. ``step0_identical``: the initial parameters agree bit for bit.
    """
    check_comparable([reference, candidate])
    names = reference.layout.names
    rows, step0 = [], False
    for a, b in aligned([reference, candidate]):
        if a.step == 0:
            step0 = bitwise_equal(a.tensors, b.tensors, names)
        d = max_abs_diff(a.tensors, b.tensors, names)
        rows.append(
            {
                "step": a.step,
                "loss_a": a.loss,
                "loss_b": b.loss,
                "dloss": _dloss(a.loss, b.loss),
                "max_dparam": d.value,
                "where": d.where,
            }
        )
    return PerStep(rows, step0)


def split(
    ref32: TraceReader, cand32: TraceReader, ref64: TraceReader, cand64: TraceReader
) -> list[dict]:
    """The float64 split of a pair: per step ``step, max_dparam, torch_f64, candle_f64,
    f64_f64``, i.e. max|ref32 − cand32|, max|ref32 − ref64|, max|cand32 − cand64| and
    max|ref64 − cand64| (column names follow the study, where the reference is PyTorch).

    The f64 runs are the yardstick for what rounding alone explains, the idea of
    TorchDynamo's ``same()`` (torch/_dynamo/utils.py), which compares against an fp64 run.
    """
    readers = [ref32, cand32, ref64, cand64]
    check_comparable(readers)
    names = ref32.layout.names
    rows = []
    for r32, c32, r64, c64 in aligned(readers):
        rows.append(
            {
                "step": r32.step,
                "max_dparam": max_abs_diff(r32.tensors, c32.tensors, names).value,
                "torch_f64": max_abs_diff(r32.tensors, r64.tensors, names).value,
                "candle_f64": max_abs_diff(c32.tensors, c64.tensors, names).value,
                "f64_f64": max_abs_diff(r64.tensors, c64.tensors, names).value,
            }
        )
    return rows


def worst(rows: Sequence[Mapping], column: str) -> tuple[float, int | None]:
    """(largest value of ``column`` over the rows, its first step); NaN wins, None skipped."""
    best, at = -math.inf, None
    for r in rows:
        v = r[column]
        if v is None:
            continue
        if math.isnan(v):
            return math.nan, r["step"]
        if v > best:
            best, at = v, r["step"]
    return (best if at is not None else math.nan), at
