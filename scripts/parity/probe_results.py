"""Probe results: the Parquet schema of one probe run, defined here once, and the judging.

One file per (probe, framework, dtype, device), ``results/probes/{probe}/{framework}-{dtype}-
{device}.parquet`` (``probe_plan.ProbeKey.result``), one row per (case, quantity) in the probe's
order (``Probe.quantities``):

* ``case``, ``quantity`` (string, not null): ``batch2``, ``w.grad``;
* ``status`` (string, not null): ``ok``, ``missing-gradient`` (the framework gave no
  gradient), ``framework-error`` (the framework raised; ``message`` says what) or
  ``unsupported`` (the framework's API lacks an op or argument of the case; ``message`` says
  which);
* ``shape`` (list<int64>) and ``values`` (list<float64>, row-major): null unless ``ok``;
  values of the run's dtype widened exactly to float64; NaN and ±Inf kept as they are;
* ``message`` (string): the framework's error or why it cannot run the case, or null;
* file key-value metadata ``parity.probe``: a JSON object with :data:`REQUIRED_METADATA`,
  sealed with its sha256 under ``parity.probe.sha256``;
* CRC-32 checksums on every page, verified by :func:`read_results` (``integrity``).

:func:`judge_probe_row` turns a result and its reference into a table row's verdict
(see ``verdicts.probe_verdict``).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from . import closeness, integrity, verdicts
from .fileio import atomic_path
from .probe_plan import ProbeKey
from .probes import Probe

#: 2: page checksums and the sealed metadata (a version 1 result is refused: rerun it).
SCHEMA_VERSION = 2
METADATA_KEY = b"parity.probe"
OK = "ok"
STATUSES = (OK, verdicts.MISSING_GRADIENT, verdicts.FRAMEWORK_ERROR, verdicts.UNSUPPORTED)

ARROW_SCHEMA = pa.schema(
    [
        pa.field("case", pa.string(), nullable=False),
        pa.field("quantity", pa.string(), nullable=False),
        pa.field("status", pa.string(), nullable=False),
        pa.field("shape", pa.list_(pa.int64())),
        pa.field("values", pa.list_(pa.float64())),
        pa.field("message", pa.string()),
    ]
)

#: Metadata every result file carries, with the Python type of each value.
REQUIRED_METADATA: dict[str, type] = {
    "schema_version": int,
    "probe": str,
    "probe_hash": str,
    "framework": str,
    "framework_version": str,
    "dtype": str,
    "device": str,
    "host": str,
    "runner": dict,
}


class ProbeResultError(ValueError):
    """A result file that cannot be trusted; the message names the file and the field."""

    def __init__(self, path: str | os.PathLike, problem: str):
        super().__init__(f"{path}: {problem}")
        self.path = str(path)


@dataclass
class Outcome:
    """What one framework reported for one (case, quantity)."""

    case: str
    quantity: str
    status: str
    #: Row-major float64 values (``ok`` only).
    values: np.ndarray | None = None
    shape: tuple[int, ...] | None = None
    message: str | None = None

    @classmethod
    def ok(cls, case: str, quantity: str, values, shape: Sequence[int]) -> Outcome:
        """An outcome with values (any float array; widened to float64)."""
        arr = np.asarray(values, dtype=np.float64).reshape(-1)
        return cls(case, quantity, OK, arr, tuple(int(d) for d in shape))

    @classmethod
    def missing_gradient(cls, case: str, quantity: str) -> Outcome:
        """The framework gave no gradient for ``quantity``."""
        return cls(case, quantity, verdicts.MISSING_GRADIENT, message="no gradient")

    @classmethod
    def error(cls, case: str, quantity: str, message: str) -> Outcome:
        """The framework raised ``message`` before ``quantity`` was known."""
        return cls(case, quantity, verdicts.FRAMEWORK_ERROR, message=message)

    @classmethod
    def unsupported(cls, case: str, quantity: str, message: str) -> Outcome:
        """The framework's API cannot compute the case; ``message`` says why."""
        return cls(case, quantity, verdicts.UNSUPPORTED, message=message)


def write_results(
    path: str | os.PathLike,
    probe: Probe,
    key: ProbeKey,
    outcomes: Sequence[Outcome],
    metadata: Mapping,
) -> None:
    """Write the outcomes of one run atomically.

    ``outcomes`` must hold every (case, quantity) of ``probe`` once, in the probe's order.
    ``metadata`` gives ``framework_version``, ``host`` and ``runner``; the rest comes from
    ``probe`` and ``key``. Raises :class:`ProbeResultError` for a missing, extra or
    misordered row, an unknown status, or values whose count does not fit their shape.
    """
    want = probe.quantities()
    got = [(o.case, o.quantity) for o in outcomes]
    if got != want:
        extra = [g for g in got if g not in want]
        missing = [w for w in want if w not in got]
        what = (
            f"row {missing[0]} is missing"
            if missing
            else f"row {extra[0]} is not in the probe"
            if extra
            else "rows are out of order"
        )
        raise ProbeResultError(path, what)
    for o in outcomes:
        if o.status not in STATUSES:
            raise ProbeResultError(path, f"{o.case} {o.quantity}: unknown status {o.status!r}")
        if (o.status == OK) != (o.values is not None):
            raise ProbeResultError(path, f"{o.case} {o.quantity}: values exactly when ok")
        if o.values is not None and o.values.size != math.prod(o.shape or ()):
            raise ProbeResultError(
                path, f"{o.case} {o.quantity}: {o.values.size} values for shape {o.shape}"
            )
    meta = {
        "schema_version": SCHEMA_VERSION,
        "probe": probe.name,
        "probe_hash": probe.hash,
        "framework": key.framework,
        "dtype": key.dtype,
        "device": key.device,
        **metadata,
    }
    _check_metadata(path, meta)
    table = pa.Table.from_pydict(
        {
            "case": [o.case for o in outcomes],
            "quantity": [o.quantity for o in outcomes],
            "status": [o.status for o in outcomes],
            "shape": [list(o.shape) if o.shape is not None else None for o in outcomes],
            "values": [o.values.tolist() if o.values is not None else None for o in outcomes],
            "message": [o.message for o in outcomes],
        },
        schema=ARROW_SCHEMA,
    )
    table = table.replace_schema_metadata(
        integrity.seal(METADATA_KEY, json.dumps(meta, sort_keys=True))
    )
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp, **integrity.PARQUET_WRITE)


def _check_metadata(path, meta: Mapping) -> None:
    for k, kind in REQUIRED_METADATA.items():
        if k not in meta:
            raise ProbeResultError(path, f"metadata field {k!r} is missing")
        if not isinstance(meta[k], kind) or (kind is int and isinstance(meta[k], bool)):
            raise ProbeResultError(path, f"metadata field {k!r} has type {type(meta[k]).__name__}")
    if meta["schema_version"] != SCHEMA_VERSION:
        raise ProbeResultError(
            path, f"schema_version {meta['schema_version']} is not {SCHEMA_VERSION}; rerun"
        )


def read_results(
    path: str | os.PathLike, probe: Probe, key: ProbeKey
) -> tuple[dict, dict[tuple[str, str], Outcome]]:
    """Open a result file and check it against the probe and the run it must come from.

    Returns (metadata, outcomes by (case, quantity)). Raises :class:`ProbeResultError`
    naming the file and the field: unreadable file, a page or the metadata that does not
    match its checksum (corrupt), missing or malformed metadata, a
    metadata value that differs from ``probe``/``key`` (a stale result), a column of the
    wrong type, or rows that differ from the probe's quantities.
    """
    path = Path(path)
    try:
        pf = integrity.open_parquet(path)
    except (pa.ArrowException, OSError, UnicodeDecodeError) as e:
        raise ProbeResultError(path, f"not a readable Parquet file ({e})") from e
    try:
        raw = integrity.unseal(path, pf.metadata.metadata, METADATA_KEY)
    except integrity.IntegrityError as e:
        raise ProbeResultError(path, e.problem) from None
    if raw is None:
        raise ProbeResultError(path, "no 'parity.probe' metadata: not a probe result")
    try:
        meta = json.loads(raw)
    except json.JSONDecodeError as e:
        raise ProbeResultError(path, f"metadata is not valid JSON ({e})") from e
    _check_metadata(path, meta)
    expect = {
        "probe": probe.name,
        "probe_hash": probe.hash,
        "framework": key.framework,
        "dtype": key.dtype,
        "device": key.device,
    }
    for k, v in expect.items():
        if meta[k] != v:
            raise ProbeResultError(path, f"metadata {k!r} is {meta[k]!r}, expected {v!r}")
    got = pf.schema_arrow
    for f in ARROW_SCHEMA:
        if f.name not in got.names:
            raise ProbeResultError(path, f"column {f.name!r} is missing")
        if got.field(f.name).type != f.type:
            raise ProbeResultError(
                path, f"column {f.name!r} has type {got.field(f.name).type}, expected {f.type}"
            )
    try:
        rows = pf.read().to_pylist()
    except (pa.ArrowException, OSError, UnicodeDecodeError) as e:
        raise ProbeResultError(
            path, f"corrupt: {e} (its page checksums do not match); rerun the job"
        ) from e
    out = {}
    for r in rows:
        values = None if r["values"] is None else np.asarray(r["values"], dtype=np.float64)
        shape = None if r["shape"] is None else tuple(r["shape"])
        out[(r["case"], r["quantity"])] = Outcome(
            r["case"], r["quantity"], r["status"], values, shape, r["message"]
        )
    if [(r["case"], r["quantity"]) for r in rows] != probe.quantities():
        raise ProbeResultError(path, "rows differ from the probe's cases and quantities")
    return meta, out


# ----- judging -----------------------------------------------------------------------------


def expand(ref: Mapping, size: int) -> np.ndarray:
    """Normalized reference values (``{"fill": v}`` or ``{"values": [...]}``) as an array;
    a fill has ``size`` elements."""
    if "fill" in ref:
        return np.full(size, ref["fill"], dtype=np.float64)
    return np.asarray(ref["values"], dtype=np.float64)


def _max_diff(quantity: str, values: np.ndarray, reference: np.ndarray) -> float:
    """``closeness.max_abs_diff`` of one quantity's values against a reference; NaN (never
    within a tolerance) when their counts differ, as arrays of different sizes have no
    difference."""
    if values.size != reference.size:
        return math.nan
    return closeness.max_abs_diff({quantity: values}, {quantity: reference}, [quantity]).value


@dataclass(frozen=True)
class ProbeJudgement:
    """A table row's comparison: reference label and values, max difference, the absolute
    tolerance it was held to, verdict, note."""

    reference: str
    reference_values: np.ndarray | None
    max_diff: float | None
    tolerance: float | None
    verdict: str
    note: str


def judge_probe_row(
    probe: Probe,
    key: ProbeKey,
    outcome: Outcome,
    reference: Outcome | None,
) -> ProbeJudgement:
    """Verdict of one (case, quantity) of run ``key``.

    The reference is the probe's exact values where it gives them, else ``reference`` (the
    same quantity from PyTorch on the CPU in the same dtype; None when that run is ``key``
    itself or is missing). An ``unsupported`` outcome is the verdict ``unsupported`` (an
    accepted one), its note "not supported by {framework}: {why}". Values not within the
    tolerance of the reference get ``closeness.mismatch_message`` as their note (how many
    elements, the greatest difference at ``quantity[flat index]``, the tolerance).
    """
    case = probe.case(outcome.case)
    q = outcome.quantity
    exact = case["exact"].get(q)
    devices = case["known_bug"].get(key.framework, {})
    bug = devices.get(f"{key.device}-{key.dtype}", {}).get(q, devices.get(key.device, {}).get(q))
    # A known bug is either the values it produces or the outcome it has instead.
    bug_outcome = bug if isinstance(bug, str) else None
    if bug_outcome is not None:
        bug = None
    if outcome.status == verdicts.UNSUPPORTED:
        note = f"not supported by {key.framework}: {outcome.message or 'no reason given'}"
        return ProbeJudgement("", None, None, None, verdicts.UNSUPPORTED, note)
    if outcome.status in (verdicts.FRAMEWORK_ERROR, verdicts.MISSING_GRADIENT):
        verdict = verdicts.KNOWN_BUG if bug_outcome == outcome.status else outcome.status
        return ProbeJudgement("", None, None, None, verdict, outcome.message or "")
    values = outcome.values
    if exact is not None:
        label, ref = "exact", expand(exact, values.size)
    elif key.is_reference:
        return ProbeJudgement("", None, None, None, verdicts.REFERENCE, "")
    elif reference is None or reference.status != OK:
        why = "missing" if reference is None else reference.status
        return ProbeJudgement(
            key.reference.label, None, None, None, verdicts.ERROR, f"reference {why}"
        )
    else:
        label, ref = key.reference.label, reference.values
    worst = _max_diff(q, values, ref)
    tol = closeness.scaled_tolerance(probe.tolerance(key.dtype), ref)
    notes = []
    if values.size != ref.size:
        notes.append(f"{values.size} values where the reference has {ref.size}")
    elif not closeness.within(worst, tol):
        notes.append(closeness.mismatch_message({q: values}, {q: ref}, [q], tol))
    # A known bug's values are held to the same absolute tolerance.
    bug_worst = None if bug is None else _max_diff(q, values, expand(bug, values.size))
    finite_ref = np.isfinite(ref) if ref.size == values.size else np.ones(values.size, bool)
    non_finite = bool((~np.isfinite(values) & finite_ref).any())
    verdict = verdicts.probe_verdict(worst, tol, known_bug_worst=bug_worst, non_finite=non_finite)
    if bug_outcome is not None:
        if verdict == verdicts.PASS:
            verdict = verdicts.KNOWN_BUG_FIXED
        elif verdict == bug_outcome:
            verdict = verdicts.KNOWN_BUG
    return ProbeJudgement(label, ref, worst, tol, verdict, "; ".join(notes))
