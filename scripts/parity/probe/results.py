"""Probe results: the Parquet schema of one probe run, defined here once, and the judging.

Over 500 lines: the judging reads exactly what the schema holds (statuses, shapes, the
values' widening), so the two stay together; a split is noted as a follow-up.

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
(see ``verdicts.probe_verdict``): shapes compared (a scalar ``[]`` equals ``[1]``), integer
quantities exactly, ``expect: error`` cases passed by an error, and f32/f16/bf16 values
against PyTorch in their dtype also by the float64-referenced rule (:func:`fp64_check`).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from parity.compare import closeness, verdicts
from parity.core import integrity
from parity.core.fileio import atomic_path
from parity.probe.format import Probe
from parity.probe.plan import FP64_RULE_DEFAULTS, ProbeKey
from parity.render.tables import shape_text

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

#: Ops whose result is int64 (``probe_spec/op.rs``, ``Op::integer_output``).
INTEGER_OPS = frozenset({"argmax", "argmin", "argsort"})
#: Ops that only move values: an integer tensor stays integer through them.
LAYOUT_OPS = frozenset(
    {"transpose", "narrow", "broadcast_to", "unsqueeze", "squeeze", "reshape", "contiguous"}
)
#: Stored significand bits of each run dtype: the ulp of 1 is 2^-bits.
SIGNIFICAND_BITS = {"f64": 52, "f32": 23, "f16": 10, "bf16": 7}
#: Run dtypes the float64-referenced rule judges (against PyTorch in the same dtype).
FP64_RULE_DTYPES = ("f32", "f16", "bf16")
#: Half precision: exact values are judged through the float64-referenced rule there.
HALF_DTYPES = ("f16", "bf16")
#: What a case expects (normalized ``expect``; absent: values).
EXPECT_VALUES, EXPECT_ERROR = "values", "error"


def expand(ref: Mapping, size: int) -> np.ndarray:
    """Normalized reference values (``{"fill": v}`` or ``{"values": [...]}``) as an array;
    a fill has ``size`` elements."""
    if "fill" in ref:
        return np.full(size, ref["fill"], dtype=np.float64)
    return np.asarray(ref["values"], dtype=np.float64)


def nesting_shape(ref: Mapping) -> tuple[int, ...] | None:
    """The nesting shape of reference values written as a nested list (normalized key
    ``shape``, when the normalized form carries it), or None: a fill, a flat list (only its
    element count is compared) or no recorded shape."""
    shape = ref.get("shape")
    if shape is None or len(shape) < 2:
        return None
    return tuple(int(d) for d in shape)


def same_shape(a: Sequence[int], b: Sequence[int]) -> bool:
    """Whether two quantity shapes agree: equal, a scalar ``[]`` equal to ``[1]`` (burn
    has no rank-0 tensor)."""

    def norm(s):
        s = tuple(int(d) for d in s)
        return (1,) if s == () else s

    return norm(a) == norm(b)


def ulp(dtype: str, magnitude: float) -> float:
    """The spacing of ``dtype``'s values at ``magnitude`` (``np.spacing``), for a positive
    finite magnitude at which the dtype is normal (here: at least 1): 2^(e − bits) for
    2^e ≤ magnitude < 2^(e+1), ``bits`` from :data:`SIGNIFICAND_BITS`. A formula because
    NumPy has no bfloat16; equal to ``np.spacing`` of f16, f32 and f64 normal values.
    Raises ``KeyError`` for another dtype."""
    _, e = math.frexp(magnitude)  # magnitude = m · 2^e with 0.5 ≤ m < 1
    return math.ldexp(1.0, e - 1 - SIGNIFICAND_BITS[dtype])


def case_tolerance(probe: Probe, case: Mapping, dtype: str) -> float:
    """The relative tolerance of ``case`` in ``dtype``: the case's own ``tolerance`` for
    that dtype, else the file's, else 0 (exact). A local reading of the normalized form,
    as ``Probe.case_tolerance`` gives it."""
    own = case.get("tolerance") or {}
    if own.get(dtype) is not None:
        return float(own[dtype])
    return float(probe.spec["tolerance"].get(dtype, 0.0))


def integer_quantity(probe: Probe, case: Mapping, quantity: str) -> bool:
    """Whether ``quantity`` holds integers (int64 in every framework): the output of an
    op with an integer result (:data:`INTEGER_OPS`), an int64 input, or either moved by a
    layout op (:data:`LAYOUT_OPS`). Gradients, optimizer state and the loss never are."""
    base, _, suffix = quantity.partition(".")
    if suffix or quantity == "loss":
        return False
    integer = {i["name"] for i in probe.spec["inputs"] if i.get("dtype") == "int64"}
    for step in case["steps"]:
        op = step["op"]["name"]
        if op in INTEGER_OPS or (op in LAYOUT_OPS and step["inputs"][0] in integer):
            integer.add(step["out"])
    return base in integer


def _max_diff(quantity: str, values: np.ndarray, reference: np.ndarray) -> float:
    """``closeness.max_abs_diff`` of one quantity's values against a reference; NaN (never
    within a tolerance) when their counts differ, as arrays of different sizes have no
    difference."""
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
    ref_err = _max_diff(quantity, reference, reference64)
    if not math.isfinite(ref_err):
        return None
    cand_err = _max_diff(quantity, values, reference64)
    finite = np.abs(reference64[np.isfinite(reference64)])
    magnitude = max(1.0, float(finite.max()) if finite.size else 1.0)
    floor = float(rule["floor_ulps"]) * ulp(dtype, magnitude)
    m = closeness.fp64_rule_multiplier(values.size, rule["multiplier"])
    check = Fp64Check(False, cand_err, ref_err, m, floor)
    return replace(check, passed=closeness.within(cand_err, check.bound))


@dataclass(frozen=True)
class ProbeJudgement:
    """A table row's comparison: reference label and values, max difference, the absolute
    tolerance it was held to, verdict, note; with the float64-referenced rule, the float64
    reference's values and the rule's outcome (``fp64``), else None; ``reference_shape``
    the reference's shape where one is known."""

    reference: str
    reference_values: np.ndarray | None
    max_diff: float | None
    tolerance: float | None
    verdict: str
    note: str
    reference64_values: np.ndarray | None = None
    fp64: Fp64Check | None = None
    reference_shape: tuple[int, ...] | None = None


def _bug(case: Mapping, key: ProbeKey, quantity: str, release: str | None = None):
    """(the known bug's values, the outcome it has instead) for ``key``'s framework,
    device and dtype (a ``device-dtype`` entry before the device's); None where none. A
    remote host's device (``cpu@mac``) takes the entries of its device (``cpu``,
    ``ProbeKey.base_device``). A bug whose ``versions`` do not name ``release`` (the
    framework's release that made the result; None: any) is none."""
    in_versions = case.get("known_bug_versions", {}).get(key.framework)
    if release and in_versions is not None and release not in in_versions:
        return None, None
    devices = case["known_bug"].get(key.framework, {})
    device = key.base_device
    bug = devices.get(f"{device}-{key.dtype}", {}).get(
        quantity, devices.get(device, {}).get(quantity)
    )
    if isinstance(bug, str):
        return None, bug
    return bug, None


def _expected_error(
    probe: Probe, key: ProbeKey, outcome: Outcome, bug, bug_outcome
) -> ProbeJudgement:
    """A case that expects an error: the framework's error passes (its message is the
    note); values, or a missing gradient, fail, unless a known bug records them."""
    recorded = bug is not None or bug_outcome is not None
    if outcome.status == verdicts.FRAMEWORK_ERROR:
        verdict = verdicts.KNOWN_BUG_FIXED if recorded else verdicts.PASS
        note = f"error as expected: {outcome.message or 'no message'}"
        return ProbeJudgement("error", None, None, None, verdict, note)
    if outcome.status == verdicts.MISSING_GRADIENT:
        verdict = verdicts.KNOWN_BUG if bug_outcome == outcome.status else verdicts.FAIL
        return ProbeJudgement(
            "error", None, None, None, verdict, "no gradient where an error is expected"
        )
    values = outcome.values
    note = "returned values where an error is expected"
    if bug is not None:
        tol = closeness.scaled_tolerance(
            case_tolerance(probe, probe.case(outcome.case), key.dtype), values
        )
        worst = _max_diff(outcome.quantity, values, expand(bug, values.size))
        if closeness.within(worst, tol):
            return ProbeJudgement("error", None, None, None, verdicts.KNOWN_BUG, note)
    return ProbeJudgement("error", None, None, None, verdicts.FAIL, note)


def _reference_row(
    probe: Probe, case: Mapping, key: ProbeKey, outcome: Outcome, reference64: Outcome | None
) -> ProbeJudgement:
    """The reference run's own row; in f32, f16 and bf16 with its error against PyTorch
    float64 (the scale of the float64-referenced rule) where that run has values."""
    q = outcome.quantity
    ref64 = None if reference64 is None or reference64.status != OK else reference64.values
    if (
        key.dtype not in FP64_RULE_DTYPES
        or ref64 is None
        or integer_quantity(probe, case, q)
        or ref64.size != outcome.values.size
    ):
        return ProbeJudgement("", None, None, None, verdicts.REFERENCE, "")
    err = _max_diff(q, outcome.values, ref64)
    note = f"float64 error: max|{key.label} − {key.reference64.label}| = {_g(err)}"
    own = Fp64Check(True, err, err, 1.0, 0.0)
    return ProbeJudgement("", None, None, None, verdicts.REFERENCE, note, ref64, own)


def judge_probe_row(
    probe: Probe,
    key: ProbeKey,
    outcome: Outcome,
    reference: Outcome | None,
    reference64: Outcome | None = None,
    fp64_rule: Mapping | None = None,
    release: str | None = None,
) -> ProbeJudgement:
    """Verdict of one (case, quantity) of run ``key``; ``release`` the framework release
    that made it (its known bugs' ``versions`` say whether they apply; None: they do).

    The reference is the probe's exact values where it gives them, else ``reference`` (the
    same quantity from PyTorch on the CPU in the same dtype; None when that run is ``key``
    itself or is missing). An ``unsupported`` outcome is the verdict ``unsupported`` (an
    accepted one), its note "not supported by {framework}: {why}".

    Values are held to the case's tolerance in ``key.dtype`` (:func:`case_tolerance`,
    scaled by ``closeness.scaled_tolerance``; 0 for an :func:`integer_quantity`, compared
    exactly), and their shape to the reference's (:func:`same_shape`: the reference run's
    shape, or the nesting shape of exact values written nested; otherwise the element
    count). Values not within the tolerance get ``closeness.mismatch_message`` as their
    note. An f32, f16 or bf16 row judged against PyTorch in its dtype also passes by the
    float64-referenced rule (:func:`fp64_check`, with ``reference64``, PyTorch float64 on
    the CPU, and ``fp64_rule``, config ``probes.fp64_rule``); then the note says which rule
    passed it, with both errors against float64.

    A case with ``expect: error`` passes on a framework error (PyTorch's included: its
    error is what the case expects) and fails on values. Known bugs (framework → device or
    ``device-dtype`` → quantity) turn a reproduced bug into ``known-bug`` and a vanished
    one into ``known-bug-fixed``.
    """
    case = probe.case(outcome.case)
    q = outcome.quantity
    exact = case["exact"].get(q)
    bug, bug_outcome = _bug(case, key, q, release)
    if outcome.status == verdicts.UNSUPPORTED:
        note = f"not supported by {key.framework}: {outcome.message or 'no reason given'}"
        return ProbeJudgement("", None, None, None, verdicts.UNSUPPORTED, note)
    if case.get("expect", EXPECT_VALUES) == EXPECT_ERROR:
        return _expected_error(probe, key, outcome, bug, bug_outcome)
    if outcome.status in (verdicts.FRAMEWORK_ERROR, verdicts.MISSING_GRADIENT):
        verdict = verdicts.KNOWN_BUG if bug_outcome == outcome.status else outcome.status
        return ProbeJudgement("", None, None, None, verdict, outcome.message or "")
    values = outcome.values
    ref_shape = None
    integer = integer_quantity(probe, case, q)
    # Half precision cannot hold most exact values, nor the sums that lead to them: there
    # the exact values are the float64 truth of the float64-referenced rule and PyTorch in
    # the run dtype is the rounding yardstick (its own row is the reference).
    half_exact = exact is not None and not integer and key.dtype in HALF_DTYPES
    if half_exact and key.is_reference:
        ref = expand(exact, values.size)
        note = (
            f"exact values taken as the float64 truth in {key.dtype}: "
            f"max|{key.label} − exact| = {_g(_max_diff(q, values, ref))}"
        )
        return ProbeJudgement("exact", ref, None, None, verdicts.REFERENCE, note)
    if exact is not None:
        label, ref = "exact", expand(exact, values.size)
        ref_shape = nesting_shape(exact)
    elif key.is_reference:
        return _reference_row(probe, case, key, outcome, reference64)
    elif reference is None or reference.status != OK:
        why = "missing" if reference is None else reference.status
        return ProbeJudgement(
            key.reference.label, None, None, None, verdicts.ERROR, f"reference {why}"
        )
    else:
        label, ref = key.reference.label, reference.values
        ref_shape = reference.shape
    worst = _max_diff(q, values, ref)
    tol = (
        0.0 if integer else closeness.scaled_tolerance(case_tolerance(probe, case, key.dtype), ref)
    )
    notes = []
    shape_ok = ref_shape is None or outcome.shape is None or same_shape(outcome.shape, ref_shape)
    if not shape_ok:
        notes.append(
            f"shape {shape_text(outcome.shape)} where the reference has {shape_text(ref_shape)}"
        )
    if values.size != ref.size:
        notes.append(f"{values.size} values where the reference has {ref.size}")
    elif not closeness.within(worst, tol):
        mismatch = closeness.mismatch_message({q: values}, {q: ref}, [q], tol)
        notes.append(mismatch)
    integral = not integer or (_integral(values) and _integral(ref))
    if not integral:
        notes.append("an integer quantity holds values that are not integers")
    # The float64-referenced rule: only against PyTorch in the run dtype, never for integers.
    fp64, ref64 = None, None
    if half_exact:
        if reference is not None and reference.status == OK:
            fp64 = fp64_check(q, values, reference.values, ref, key.dtype, fp64_rule)
        elif not closeness.within(worst, tol):
            why = "missing" if reference is None else reference.status
            notes.append(f"float64-referenced rule not applied: {key.reference.label} {why}")
    elif exact is None and not integer and key.dtype in FP64_RULE_DTYPES:
        if reference64 is not None and reference64.status == OK:
            ref64 = reference64.values
            fp64 = fp64_check(q, values, ref, ref64, key.dtype, fp64_rule)
            if fp64 is None and values.size == ref.size == ref64.size:
                notes.append(
                    f"float64-referenced rule not applied: {label} is non-finite where "
                    f"{key.reference64.label} is finite"
                )
        elif reference64 is not None and not closeness.within(worst, tol):
            notes.append(
                f"float64-referenced rule not applied: {key.reference64.label} {reference64.status}"
            )
    if fp64 is not None:
        how = (
            fp64.describe(key.label, key.reference.label, "exact")
            if half_exact
            else fp64.describe(key.label, label, key.reference64.label)
        )
        if not shape_ok:
            notes.append(f"float64 errors: {how}")
        elif closeness.within(worst, tol):
            notes.append(f"passed by the tolerance; float64 errors: {how}")
        elif fp64.passed:
            # The rule that passed it first, then why the tolerance did not.
            notes.remove(mismatch)
            notes.append(
                f"passed by the float64-referenced rule: {how}; beyond the tolerance: {mismatch}"
            )
        else:
            notes.append(f"the float64-referenced rule fails too: {how}")
    # A known bug's values are held to the same absolute tolerance.
    bug_worst = None if bug is None else _max_diff(q, values, expand(bug, values.size))
    finite_ref = np.isfinite(ref) if ref.size == values.size else np.ones(values.size, bool)
    non_finite = bool((~np.isfinite(values) & finite_ref).any())
    # In half precision a known bug's values are rounded too: they match within the
    # float64-referenced rule's bound as well.
    bug_tol = max(tol, fp64.bound) if fp64 is not None and key.dtype in HALF_DTYPES else tol
    verdict = verdicts.probe_verdict(
        worst,
        tol,
        known_bug_worst=bug_worst,
        known_bug_tolerance=bug_tol,
        non_finite=non_finite,
        fp64_pass=fp64 is not None and fp64.passed,
        invalid=not shape_ok or not integral,
    )
    if bug_outcome is not None:
        if verdict == verdicts.PASS:
            verdict = verdicts.KNOWN_BUG_FIXED
        elif verdict == bug_outcome or (
            bug_outcome == verdicts.WRONG_VALUES and verdict in (verdicts.FAIL, verdicts.NON_FINITE)
        ):
            verdict = verdicts.KNOWN_BUG
    return ProbeJudgement(
        label,
        ref,
        worst,
        tol,
        verdict,
        "; ".join(notes),
        reference64_values=ref64,
        fp64=fp64,
        reference_shape=None if ref_shape is None else tuple(ref_shape),
    )


def _integral(values: np.ndarray) -> bool:
    """Whether every finite value is an integer (NaN and ±Inf are left to the comparison)."""
    finite = values[np.isfinite(values)]
    return bool((finite == np.round(finite)).all())
