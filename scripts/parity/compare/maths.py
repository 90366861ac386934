"""The per-step comparison maths: traces streamed in step, the per-step table and the
float64 split, the worst value of a column and the first step beyond a tolerance. Every
comparison table is a view of this module and of :mod:`parity.compare.diagnosis` (ULP,
RMSE, signed errors, the fp64-referenced rule, the diagnosis table).

Differences are :mod:`closeness`'s: |a − b| in float64 (a float32 value widens to float64
exactly, and the difference of two float32 values is exact in float64, so a reported
difference is the true distance between the two runs' values, not a rounded one), under
its one rule for NaN and Inf (equal values and NaN against NaN count 0, a NaN or an Inf
against a different value counts ``+inf``; never NaN).

Locations are reported in PyTorch layout as ``name[flat index]`` (``fc.weight[67]`` is
``fc.weight[1, 19]`` for a ``[3, 48]`` weight). Ties go to the first parameter in state_dict
order, then the lowest index, so a table of zeros points at ``fc1.weight[0]`` as the study's
does.

The comparisons stream: traces are read a row group at a time
(``reader.TraceReader.iter_steps``), so memory stays bounded by a few steps of data. A step's
parameters arrive as one contiguous array (``StepRecord.flat``, the trace's flat layout),
so a whole-step maximum is a few numpy passes over it rather than a few per tensor.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from parity.compare import closeness
from parity.compare.closeness import abs_diff, max_abs_diff
from parity.trace.reader import TraceReader
from parity.trace.schema import StepRecord


class ComparisonError(ValueError):
    """Traces that cannot be compared (different parameters, steps or fixtures)."""


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

    They must hold the same parameters with the same shapes, record the same steps (a run
    that failed, status ``failed``, records the first of them: those before its failure),
    and come from the same fixture (and from ``fixture_sha256``, the current fixture, if
    given). Raises :class:`ComparisonError` naming both files.
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
        if first.steps != r.steps and not _failed_prefix(first, r):
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


def _failed_prefix(a: TraceReader, b: TraceReader) -> bool:
    """Whether the shorter of two traces is a failed run's, holding the first of the other's
    steps (the steps before its failure)."""
    short, long = sorted((a, b), key=lambda r: len(r.steps))
    return short.meta["status"] == "failed" and long.steps[: len(short.steps)] == short.steps


def failures(readers: Sequence[TraceReader]) -> list[dict]:
    """The runs among ``readers`` that failed (status ``failed``: the framework raised an
    error during a step), in order: ``{"run"`` (``candle f32 cpu``), ``"step"``,
    ``"error"`` (the framework's message), ``"message"`` (all three in words)``}``."""
    out = []
    for r in readers:
        m = r.meta
        if m["status"] != "failed":
            continue
        run = f"{m['run']} {m['dtype']} {m['device']}"
        message = f"{run} failed at step {m['failed_step']}: {m['error']}"
        out.append({"run": run, "step": m["failed_step"], "error": m["error"], "message": message})
    return out


#: Threads that read the traces of a comparison ahead: each trace's next step is one task,
#: so the four traces of a split are read two at a time while the caller works (reading,
#: its page checksums included, costs about twice the comparison maths; measured:
#: bench/compare_throughput.py, docs/performance.md).
READ_THREADS = 2


def aligned(readers: Sequence[TraceReader]) -> Iterator[tuple[StepRecord, ...]]:
    """Yield one record per trace for each recorded step, streaming all traces together.

    The next step of every trace is read in background threads (:data:`READ_THREADS`,
    one task per trace; pyarrow and numpy release the GIL) while the caller works on this
    one, so at most two steps of data are held at once; it ends with the shortest trace
    where that is a failed run's. Raises :class:`ComparisonError` when the traces are out
    of step or of unequal length otherwise, and what the readers raise
    (``schema.TraceError`` for a corrupt page).
    """
    iters = [r.iter_steps() for r in readers]
    threads = min(READ_THREADS, len(iters))
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="trace-reader") as pool:

        def fetch():
            # each generator is advanced by one task at a time: the next round is only
            # submitted once every task of this one has finished
            return [pool.submit(next, it, None) for it in iters]

        pending = fetch()
        while True:
            records = tuple(f.result() for f in pending)
            if all(rec is None for rec in records):
                return
            if any(rec is None for rec in records):
                ended = [r for r, rec in zip(readers, records, strict=True) if rec is None]
                if all(r.meta["status"] == "failed" for r in ended):
                    # compared up to a failed run's failure (check_comparable); the others'
                    # later steps are still read, their pages checked, as every trace a
                    # result records is read whole
                    for it, rec in zip(iters, records, strict=True):
                        if rec is not None:
                            for _ in it:
                                pass
                    return
                raise ComparisonError("traces record different numbers of steps")
            pending = fetch()
            steps = {rec.step for rec in records}
            if len(steps) != 1:
                raise ComparisonError(f"traces are out of step: {sorted(steps)}")
            yield records


def step_max_diff(a: StepRecord, b: StepRecord, names: Sequence[str]) -> float:
    """max|a − b| over the ``names`` parameters of two records of one step (closeness's
    rule, in float64): the value of ``max_abs_diff(a.tensors, b.tensors, names)``. When
    ``names`` is every parameter in state_dict order, it is computed on the records'
    contiguous ``flat`` parameters (the maximum of the whole is the maximum of its parts),
    which spares a few numpy passes per tensor. Raises ``ValueError`` when sizes differ."""
    if _whole(a, names) and _whole(b, names):
        return max_abs_diff({"": a.flat}, {"": b.flat}, [""]).value
    return max_abs_diff(a.tensors, b.tensors, names).value


def _whole(rec: StepRecord, names: Sequence[str]) -> bool:
    """Whether ``names`` are all of ``rec.flat``: the record's first tensors (the
    parameters come first, in state_dict order) and exactly its values."""
    if rec.flat is None or tuple(names) != tuple(rec.tensors)[: len(names)]:
        return False
    return sum(rec.tensors[n].size for n in names) == rec.flat.size


def _same_loss(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is b
    return np.float64(a).tobytes() == np.float64(b).tobytes()


def _dloss(a: float | None, b: float | None) -> float | None:
    if a is None or b is None:
        return None
    return abs_diff(a, b)


@dataclass
class PerStep:
    """The per-step table of a reference/candidate pair, and its step-0 check."""

    rows: list[dict]
    step0_identical: bool
    #: every recorded step identical bit for bit (what a tolerance of 0 demands)
    bitwise_identical: bool
    #: largest finite |parameter| of the reference over all steps (the figures mark one
    #: float32 ULP at this magnitude as the rounding level)
    param_scale: float = 0.0
    #: parameters that never moved from their step-0 values on one side while they did on
    #: the other (:func:`never_updated`), as ``side: name`` (``candidate: ln_f.weight``)
    never_updated: list[str] = field(default_factory=list)
    #: the first of the training loop's scalars that differs beyond rounding
    #: (:func:`scalar_differences`), ``{"step", "scalar", "a", "b"}``; None when none does or
    #: the runs have no loop
    scalar_first: dict | None = None


#: How far apart two runs' loop scalars may be, relative to the reference's, and still
#: agree: a learning rate is float64 on every side (PyTorch's schedule recursion, which the
#: Rust runners replay bit for bit, ``parity_common::schedule``), so only float64 rounding;
#: the gradient norm and the clip coefficient are computed in the run's dtype, so float32
#: rounding of a norm over many elements (2⁻¹⁶ ≈ 1.5e-5, generous: the parameters of a
#: matching float32 pair differ by about 1e-7, and so do their gradients' norms).
SCALAR_RTOL = {"lr": 2.0**-40, "grad_norm": 2.0**-16, "clip_coef": 2.0**-16}


def scalar_differences(a: StepRecord, b: StepRecord) -> list[dict]:
    """The loop scalars of one step on which the reference ``a`` and the candidate ``b``
    differ beyond :data:`SCALAR_RTOL` (a value on one side only differs), each
    ``{"scalar", "a", "b"}``: the number of parameter groups (``param_groups``) where it
    differs, the learning rates per group (``lr[group 0]``), the gradient norm, the clip
    coefficient; empty at step 0 or without scalars on both sides."""
    if not a.scalars or not b.scalars:
        return []
    out = []
    lrs_a, lrs_b = a.scalars["lr"], b.scalars["lr"]
    if len(lrs_a) != len(lrs_b):
        out.append({"scalar": "param_groups", "a": len(lrs_a), "b": len(lrs_b)})
    pairs = [
        (f"lr[group {i}]", "lr", x, y) for i, (x, y) in enumerate(zip(lrs_a, lrs_b, strict=False))
    ]
    pairs += [(n, n, a.scalars[n], b.scalars[n]) for n in ("grad_norm", "clip_coef")]
    for label, kind, x, y in pairs:
        if x is None and y is None:
            continue
        if x is None or y is None or not abs_diff(x, y) <= SCALAR_RTOL[kind] * abs(x):
            out.append({"scalar": label, "a": x, "b": y})
    return out


def never_updated(
    moved_a: Mapping[str, bool], moved_b: Mapping[str, bool], names: Sequence[str]
) -> list[str]:
    """The parameters that one run never updated while the other did: ``moved_a[n]`` is
    whether the reference's ``n`` differed from its step-0 value at any recorded step (bit
    for bit), ``moved_b[n]`` the same for the candidate. Returns
    ``reference: n`` / ``candidate: n`` in state_dict order. A parameter neither run moves
    (a gradient that is zero in both) is not listed: it is not a difference.

    This is the signature of a gradient that never arrives (a fused op without a backward,
    a detached tensor, a parameter the optimizer was not given), which a largest-difference
    figure shows only as a large number."""
    out = []
    for n in names:
        if moved_a[n] and not moved_b[n]:
            out.append(f"candidate: {n}")
        elif moved_b[n] and not moved_a[n]:
            out.append(f"reference: {n}")
    return out


def perstep(reference: TraceReader, candidate: TraceReader) -> PerStep:
    """Per recorded step: ``step, loss_a, loss_b, dloss, max_dparam, where``.

    ``loss_a``/``loss_b`` are the reference's and candidate's losses (None at step 0),
    ``dloss`` = |loss_a − loss_b| (``closeness.abs_diff``), ``max_dparam`` and ``where``
    from :func:`max_abs_diff` over every parameter (``inf`` where a run diverged
    differently from the other). ``step0_identical``: the initial parameters agree bit for bit;
    ``bitwise_identical``: so do all parameters and losses at every step.
    """
    check_comparable([reference, candidate])
    names = reference.layout.names
    loop = reference.has_scalars and candidate.has_scalars
    scalar_first = None
    rows, step0, identical, scale = [], False, True, 0.0
    first: tuple[dict, dict] | None = None
    moved: tuple[dict, dict] = ({n: False for n in names}, {n: False for n in names})
    for a, b in aligned([reference, candidate]):
        if first is None:
            first = (
                {n: a.tensors[n].copy() for n in names},
                {n: b.tensors[n].copy() for n in names},
            )
        else:
            for side, rec in ((0, a), (1, b)):
                for n in names:
                    if not moved[side][n]:
                        moved[side][n] = rec.tensors[n].tobytes() != first[side][n].tobytes()
        for n in names:
            finite = np.abs(a.tensors[n][np.isfinite(a.tensors[n])])
            scale = max(scale, float(finite.max(initial=0.0)))
        same = bitwise_equal(a.tensors, b.tensors, names) and _same_loss(a.loss, b.loss)
        identical = identical and same
        if a.step == 0:
            step0 = same
        d = max_abs_diff(a.tensors, b.tensors, names)
        row = {
            "step": a.step,
            "loss_a": a.loss,
            "loss_b": b.loss,
            "dloss": _dloss(a.loss, b.loss),
            "max_dparam": d.value,
            "where": d.where,
        }
        if loop:
            row.update(loop_columns(a, b))
            differ = scalar_differences(a, b)
            if differ and scalar_first is None:
                scalar_first = {"step": a.step, **differ[0]}
        rows.append(row)
    stuck = never_updated(moved[0], moved[1], names)
    return PerStep(rows, step0, identical, scale, stuck, scalar_first)


def params_beyond(
    reference: TraceReader, candidate: TraceReader, step: int, tolerance: float
) -> list[str]:
    """The parameters (state_dict order) whose largest difference at recorded ``step``
    exceeds ``tolerance``: what an update that differs changed (the localisation of a run
    with a training loop names them, ``parity.localise.job``)."""
    names = reference.layout.names
    a, b = reference.read_step(step), candidate.read_step(step)
    return [n for n in names if max_abs_diff(a.tensors, b.tensors, [n]).value > tolerance]


#: The differences of the loop's scalars per step (``loop_columns``), which the per-step
#: result keeps for the diagnosis figure.
LOOP_DIFFERENCES = ("dlr", "dgrad_norm", "dclip_coef")


def loop_summary(
    reference: TraceReader,
    candidate: TraceReader,
    result: PerStep,
    rows: Sequence[Mapping],
    beyond: Mapping | None,
    tolerance: float,
) -> dict:
    """The per-step result's entries of two runs with a training loop: ``scalar_first`` (the
    first scalar that differs, :func:`scalar_differences`), ``tol_exceeded_params``
    (:func:`params_beyond` at the first step beyond ``tolerance``, ``beyond``'s) and
    ``loop_rows`` (each row's :data:`LOOP_DIFFERENCES`, for the diagnosis figure)."""

    def number(v):
        return None if v is None or not math.isfinite(v) else v

    return {
        "scalar_first": result.scalar_first,
        "tol_exceeded_params": (
            params_beyond(reference, candidate, beyond["step"], tolerance) if beyond else []
        ),
        "loop_rows": [
            {"step": r["step"], **{c: number(r[c]) for c in LOOP_DIFFERENCES}} for r in rows
        ],
    }


def loop_columns(a: StepRecord, b: StepRecord) -> dict:
    """A per-step row's columns of the training loop's scalars (``tables.LOOP_COLUMNS``):
    each run's first group's learning rate, the largest difference over the groups' rates
    (``dlr``), each run's gradient norm before clipping and their difference, each run's
    clip coefficient and theirs; all None at step 0."""
    sa, sb = a.scalars or {}, b.scalars or {}
    lra, lrb = sa.get("lr") or [], sb.get("lr") or []
    dlr = [abs_diff(x, y) for x, y in zip(lra, lrb, strict=False)]
    return {
        "lr_a": lra[0] if lra else None,
        "lr_b": lrb[0] if lrb else None,
        "dlr": max(dlr) if dlr else None,
        "grad_norm_a": sa.get("grad_norm"),
        "grad_norm_b": sb.get("grad_norm"),
        "dgrad_norm": _dloss(sa.get("grad_norm"), sb.get("grad_norm")),
        "clip_coef_a": sa.get("clip_coef"),
        "clip_coef_b": sb.get("clip_coef"),
        "dclip_coef": _dloss(sa.get("clip_coef"), sb.get("clip_coef")),
    }


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
                "max_dparam": step_max_diff(r32, c32, names),
                "torch_f64": step_max_diff(r32, r64, names),
                "candle_f64": step_max_diff(c32, c64, names),
                "f64_f64": step_max_diff(r64, c64, names),
            }
        )
    return rows


def worst(rows: Sequence[Mapping], column: str) -> tuple[float, int | None]:
    """(largest value of ``column`` over the rows, its first step); None is skipped, a NaN
    (which closeness's differences never are) wins, and so does the first ``inf``.
    (NaN, None) when no row has a value."""
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


def first_row(rows: Sequence[Mapping], test) -> Mapping | None:
    """The first row after step 0 for which ``test(row)`` holds, or None."""
    return next((r for r in rows if r["step"] > 0 and test(r)), None)


def first_beyond(rows: Sequence[Mapping], tolerance: float) -> Mapping | None:
    """The first row (step > 0) of a per-step table whose ``max_dparam`` is not within
    ``tolerance`` (``closeness.within``: NaN and inf never are), or None. The per-step job
    stores its step and place in its result (``tol_exceeded_step``, ``tol_exceeded_where``),
    which the diagnosis figure, the summary and the detection table read."""
    return first_row(rows, lambda r: not closeness.within(r["max_dparam"], tolerance))
