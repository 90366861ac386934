"""Judging one probe quantity: a framework's outcome against its reference, as one
``judgement.Judgement`` (``ProbeJudgement``: with the reference's label and values).

:func:`judge_probe_row` goes through four steps, each a function here:

1. **the reference choice** (:func:`choose_reference`): the probe's exact values where it
   gives them, else PyTorch on the CPU in the same dtype; a row without one to be compared
   with (the reference's own row, a missing reference) is judged there;
2. **the shape check** (:func:`shape_problems`): the values' shape against the reference's
   (a scalar ``[]`` equals ``[1]``) and their element count;
3. **the values**, held to the case's tolerance by ``judgement.judge`` (integer quantities
   exactly), or passed by the float64-referenced rule (``parity.probe.fp64``) where f32,
   f16 and bf16 values meet PyTorch in their dtype (:func:`value_verdict`);
4. **the known-bug match** (:func:`known_bug`, :func:`match_known_bug`): a reproduced known
   bug is ``known-bug``, a vanished one ``known-bug-fixed``.

A case with ``expect: error`` passes on a framework error and fails on values; an
``unsupported`` outcome is the verdict ``unsupported``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from parity.compare import closeness, judgement, verdicts
from parity.compare.judgement import Judgement
from parity.probe.format import Probe
from parity.probe.fp64 import FP64_RULE_DTYPES, HALF_DTYPES, Fp64Check, fp64_check, max_diff
from parity.probe.plan import ProbeKey
from parity.probe.results import OK, Outcome
from parity.render.tables import shape_text

#: Ops whose result is int64 (``probe_spec/op.rs``, ``Op::integer_output``).
INTEGER_OPS = frozenset({"argmax", "argmin", "argsort"})
#: Ops that only move values: an integer tensor stays integer through them.
LAYOUT_OPS = frozenset(
    {"transpose", "narrow", "broadcast_to", "unsqueeze", "squeeze", "reshape", "contiguous"}
)
#: What a case expects (normalized ``expect``; absent: values).
EXPECT_VALUES, EXPECT_ERROR = "values", "error"


@dataclass(frozen=True)
class ProbeJudgement(Judgement):
    """A table row's judgement: the verdict, the max difference (``worst``, at ``where``),
    the absolute tolerance it was held to and the note (``message``), with the reference's
    label (``exact``, ``torch f32 cpu``, ``error``; ``""`` for the reference's own row) and
    values (flat float64, or None); with the float64-referenced rule, the float64
    reference's values and the rule's outcome (``fp64``), else None; ``reference_shape``
    the reference's shape where one is known."""

    reference: str = ""
    reference_values: np.ndarray | None = None
    reference64_values: np.ndarray | None = None
    fp64: Fp64Check | None = None
    reference_shape: tuple[int, ...] | None = None


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


def _g(v: float) -> str:
    return f"{v:.3g}"


# ----- the known-bug match ---------------------------------------------------------------


def known_bug(case: Mapping, key: ProbeKey, quantity: str, release: str | None = None):
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


def match_known_bug(verdict: str, recorded: bool, reproduced: bool) -> str:
    """The verdict of a row once its known bug is matched: without a ``recorded`` bug the
    ``verdict`` as it is; with one, a ``pass`` is ``known-bug-fixed`` (the bug is gone:
    update the probe file), a row that ``reproduced`` it ``known-bug``, any other the
    ``verdict`` (values that are neither right nor the bug's)."""
    if not recorded:
        return verdict
    if verdict == verdicts.PASS:
        return verdicts.KNOWN_BUG_FIXED
    return verdicts.KNOWN_BUG if reproduced else verdict


def value_verdict(
    within: bool, *, fp64_pass: bool = False, invalid: bool = False, non_finite: bool = False
) -> str:
    """The verdict of values the framework did produce, before the known-bug match:
    ``pass`` when they are valid (not ``invalid``: a shape other than the reference's,
    non-integers in an integer quantity) and ``within`` the tolerance (``judgement.judge``)
    or passed by the float64-referenced rule (``fp64_pass``); else ``non-finite`` when they
    hold NaN or ±Inf where the reference does not, else ``fail``."""
    if not invalid and (within or fp64_pass):
        return verdicts.PASS
    return verdicts.NON_FINITE if non_finite else verdicts.FAIL


# ----- the reference choice and the shape check ----------------------------------------------


@dataclass(frozen=True)
class Reference:
    """What a row's values are compared with: its ``label`` (``exact``, ``torch f32
    cpu``), flat float64 ``values`` and ``shape`` where one is known (the reference run's,
    or the nesting of exact values written nested)."""

    label: str
    values: np.ndarray
    shape: tuple[int, ...] | None


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
        return ProbeJudgement(verdicts.REFERENCE)
    err = max_diff(q, outcome.values, ref64)
    note = f"float64 error: max|{key.label} − {key.reference64.label}| = {_g(err)}"
    own = Fp64Check(True, err, err, 1.0, 0.0)
    return ProbeJudgement(verdicts.REFERENCE, message=note, reference64_values=ref64, fp64=own)


def choose_reference(
    probe: Probe,
    key: ProbeKey,
    outcome: Outcome,
    reference: Outcome | None,
    reference64: Outcome | None,
) -> Reference | ProbeJudgement:
    """What an ``ok`` outcome of run ``key`` is compared with: the probe's exact values
    where it gives them, else ``reference`` (PyTorch on the CPU in the same dtype). A row
    with nothing to be compared with is judged here: PyTorch's own row (``reference``; in
    half precision against exact values, which are the float64 truth of the
    float64-referenced rule there), and a row whose reference is missing or has no values
    (``error``)."""
    case = probe.case(outcome.case)
    q = outcome.quantity
    exact = case["exact"].get(q)
    values = outcome.values
    # Half precision cannot hold most exact values, nor the sums that lead to them: there
    # the exact values are the float64 truth of the float64-referenced rule and PyTorch in
    # the run dtype is the rounding yardstick (its own row is the reference).
    if exact is not None and _half_exact(probe, case, key, q) and key.is_reference:
        ref = expand(exact, values.size)
        note = (
            f"exact values taken as the float64 truth in {key.dtype}: "
            f"max|{key.label} − exact| = {_g(max_diff(q, values, ref))}"
        )
        return ProbeJudgement(
            verdicts.REFERENCE, message=note, reference="exact", reference_values=ref
        )
    if exact is not None:
        return Reference("exact", expand(exact, values.size), nesting_shape(exact))
    if key.is_reference:
        return _reference_row(probe, case, key, outcome, reference64)
    if reference is None or reference.status != OK:
        why = "missing" if reference is None else reference.status
        return ProbeJudgement(
            verdicts.ERROR, message=f"reference {why}", reference=key.reference.label
        )
    return Reference(key.reference.label, reference.values, reference.shape)


def _half_exact(probe: Probe, case: Mapping, key: ProbeKey, quantity: str) -> bool:
    """Whether exact values of a float quantity are judged in half precision (through the
    float64-referenced rule, :data:`HALF_DTYPES`)."""
    return not integer_quantity(probe, case, quantity) and key.dtype in HALF_DTYPES


def shape_fits(outcome: Outcome, ref: Reference) -> bool:
    """Whether an ``ok`` outcome's shape is the reference's (:func:`same_shape`), where
    both are known."""
    return ref.shape is None or outcome.shape is None or same_shape(outcome.shape, ref.shape)


def shape_problems(outcome: Outcome, ref: Reference) -> list[str]:
    """The shape check of an ``ok`` outcome against its reference: a shape other than the
    reference's (:func:`shape_fits`), and an element count other than the reference's;
    empty when they fit."""
    out = []
    if not shape_fits(outcome, ref):
        out.append(
            f"shape {shape_text(outcome.shape)} where the reference has {shape_text(ref.shape)}"
        )
    if outcome.values.size != ref.values.size:
        out.append(f"{outcome.values.size} values where the reference has {ref.values.size}")
    return out


# ----- one row -----------------------------------------------------------------------------


def _expected_error(
    probe: Probe, key: ProbeKey, outcome: Outcome, bug, bug_outcome
) -> ProbeJudgement:
    """A case that expects an error: the framework's error passes (its message is the
    note); values, or a missing gradient, fail, unless a known bug records them."""
    recorded = bug is not None or bug_outcome is not None
    if outcome.status == verdicts.FRAMEWORK_ERROR:
        verdict = match_known_bug(verdicts.PASS, recorded, False)
        note = f"error as expected: {outcome.message or 'no message'}"
        return ProbeJudgement(verdict, message=note, reference="error")
    if outcome.status == verdicts.MISSING_GRADIENT:
        verdict = match_known_bug(verdicts.FAIL, recorded, bug_outcome == outcome.status)
        note = "no gradient where an error is expected"
        return ProbeJudgement(verdict, message=note, reference="error")
    values = outcome.values
    reproduced = False
    if bug is not None:
        tol = closeness.scaled_tolerance(
            case_tolerance(probe, probe.case(outcome.case), key.dtype), values
        )
        worst = max_diff(outcome.quantity, values, expand(bug, values.size))
        reproduced = closeness.within(worst, tol)
    verdict = match_known_bug(verdicts.FAIL, bug is not None, reproduced)
    note = "returned values where an error is expected"
    return ProbeJudgement(verdict, message=note, reference="error")


def judge_probe_row(
    probe: Probe,
    key: ProbeKey,
    outcome: Outcome,
    reference: Outcome | None,
    reference64: Outcome | None = None,
    fp64_rule: Mapping | None = None,
    release: str | None = None,
) -> ProbeJudgement:
    """The judgement of one (case, quantity) of run ``key``; ``release`` the framework
    release that made it (its known bugs' ``versions`` say whether they apply; None: they
    do).

    The reference (:func:`choose_reference`) is the probe's exact values where it gives
    them, else ``reference`` (the same quantity from PyTorch on the CPU in the same dtype;
    None when that run is ``key`` itself or is missing). An ``unsupported`` outcome is the
    verdict ``unsupported`` (an accepted one), its note "not supported by {framework}:
    {why}".

    Values are held to the case's tolerance in ``key.dtype`` (:func:`case_tolerance`,
    scaled by ``closeness.scaled_tolerance``; 0 for an :func:`integer_quantity`, compared
    exactly) by ``judgement.judge``, and their shape to the reference's
    (:func:`shape_problems`: the reference run's shape, or the nesting shape of exact values
    written nested; otherwise the element count). Values not within the tolerance get
    ``closeness.mismatch_message`` as their note. An f32, f16 or bf16 row judged against
    PyTorch in its dtype also passes by the float64-referenced rule (``fp64.fp64_check``,
    with ``reference64``, PyTorch float64 on the CPU, and ``fp64_rule``, config
    ``probes.fp64_rule``); then the note says which rule passed it, with both errors
    against float64.

    A case with ``expect: error`` passes on a framework error (PyTorch's included: its
    error is what the case expects) and fails on values. Known bugs (framework → device or
    ``device-dtype`` → quantity) turn a reproduced bug into ``known-bug`` and a vanished
    one into ``known-bug-fixed`` (:func:`match_known_bug`).
    """
    case = probe.case(outcome.case)
    q = outcome.quantity
    bug, bug_outcome = known_bug(case, key, q, release)
    recorded = bug is not None or bug_outcome is not None
    if outcome.status == verdicts.UNSUPPORTED:
        note = f"not supported by {key.framework}: {outcome.message or 'no reason given'}"
        return ProbeJudgement(verdicts.UNSUPPORTED, message=note)
    if case.get("expect", EXPECT_VALUES) == EXPECT_ERROR:
        return _expected_error(probe, key, outcome, bug, bug_outcome)
    if outcome.status in (verdicts.FRAMEWORK_ERROR, verdicts.MISSING_GRADIENT):
        verdict = match_known_bug(outcome.status, recorded, bug_outcome == outcome.status)
        return ProbeJudgement(verdict, message=outcome.message or "")
    ref = choose_reference(probe, key, outcome, reference, reference64)
    if isinstance(ref, ProbeJudgement):
        return ref
    return _judge_values(
        probe, case, key, outcome, ref, reference, reference64, fp64_rule, bug, bug_outcome
    )


def _judge_values(
    probe: Probe,
    case: Mapping,
    key: ProbeKey,
    outcome: Outcome,
    ref: Reference,
    reference: Outcome | None,
    reference64: Outcome | None,
    fp64_rule: Mapping | None,
    bug,
    bug_outcome,
) -> ProbeJudgement:
    """An ``ok`` outcome against its reference ``ref`` (:func:`judge_probe_row`'s steps
    2 to 4)."""
    q, values = outcome.quantity, outcome.values
    integer = integer_quantity(probe, case, q)
    half_exact = ref.label == "exact" and _half_exact(probe, case, key, q)
    tol = (
        0.0
        if integer
        else closeness.scaled_tolerance(case_tolerance(probe, case, key.dtype), ref.values)
    )
    shape_ok = shape_fits(outcome, ref)
    notes = shape_problems(outcome, ref)
    worst, where, within, mismatch = float("nan"), "", False, ""
    if values.size == ref.values.size:
        judged = judgement.judge({q: ref.values}, {q: values}, tol)
        worst, where, within = judged.worst, judged.where, judged.verdict == verdicts.PASS
        if not within:
            mismatch = judged.message
            notes.append(mismatch)
    integral = not integer or (_integral(values) and _integral(ref.values))
    if not integral:
        notes.append("an integer quantity holds values that are not integers")
    # The float64-referenced rule: only against PyTorch in the run dtype, never for integers.
    fp64, ref64 = None, None
    if half_exact:
        if reference is not None and reference.status == OK:
            fp64 = fp64_check(q, values, reference.values, ref.values, key.dtype, fp64_rule)
        elif not within:
            why = "missing" if reference is None else reference.status
            notes.append(f"float64-referenced rule not applied: {key.reference.label} {why}")
    elif ref.label != "exact" and not integer and key.dtype in FP64_RULE_DTYPES:
        if reference64 is not None and reference64.status == OK:
            ref64 = reference64.values
            fp64 = fp64_check(q, values, ref.values, ref64, key.dtype, fp64_rule)
            if fp64 is None and values.size == ref.values.size == ref64.size:
                notes.append(
                    f"float64-referenced rule not applied: {ref.label} is non-finite where "
                    f"{key.reference64.label} is finite"
                )
        elif reference64 is not None and not within:
            notes.append(
                f"float64-referenced rule not applied: {key.reference64.label} {reference64.status}"
            )
    if fp64 is not None:
        how = (
            fp64.describe(key.label, key.reference.label, "exact")
            if half_exact
            else fp64.describe(key.label, ref.label, key.reference64.label)
        )
        if not shape_ok:
            notes.append(f"float64 errors: {how}")
        elif within:
            notes.append(f"passed by the tolerance; float64 errors: {how}")
        elif fp64.passed:
            # The rule that passed it first, then why the tolerance did not.
            notes.remove(mismatch)
            notes.append(
                f"passed by the float64-referenced rule: {how}; beyond the tolerance: {mismatch}"
            )
        else:
            notes.append(f"the float64-referenced rule fails too: {how}")
    finite_ref = (
        np.isfinite(ref.values) if ref.values.size == values.size else np.ones(values.size, bool)
    )
    verdict = value_verdict(
        within,
        fp64_pass=fp64 is not None and fp64.passed,
        invalid=not shape_ok or not integral,
        non_finite=bool((~np.isfinite(values) & finite_ref).any()),
    )
    # A known bug's values are held to the same absolute tolerance; in half precision they
    # are rounded too: they match within the float64-referenced rule's bound as well.
    bug_tol = max(tol, fp64.bound) if fp64 is not None and key.dtype in HALF_DTYPES else tol
    if bug is not None:
        reproduced = closeness.within(max_diff(q, values, expand(bug, values.size)), bug_tol)
    else:  # a recorded outcome: the verdict itself, or any values beyond the rules
        wrong = verdict in (verdicts.FAIL, verdicts.NON_FINITE)
        reproduced = verdict == bug_outcome or (bug_outcome == verdicts.WRONG_VALUES and wrong)
    verdict = match_known_bug(verdict, bug is not None or bug_outcome is not None, reproduced)
    return ProbeJudgement(
        verdict,
        worst,
        where,
        tol,
        "; ".join(notes),
        reference=ref.label,
        reference_values=ref.values,
        reference64_values=ref64,
        fp64=fp64,
        reference_shape=None if ref.shape is None else tuple(ref.shape),
    )


def _integral(values: np.ndarray) -> bool:
    """Whether every finite value is an integer (NaN and ±Inf are left to the comparison)."""
    finite = values[np.isfinite(values)]
    return bool((finite == np.round(finite)).all())
