"""The verdict vocabulary, used by every table and by the ``check`` target.

| verdict           | meaning                                                          |
| ----------------- | ---------------------------------------------------------------- |
| `pass`            | within tolerance, as expected                                    |
| `fail`            | beyond tolerance where a pass was expected                       |
| `expected-fail`   | a control that must fail did fail: the harness can see the fault |
| `unexpected-pass` | a control passed: the harness has lost its power (an error)      |
| `unsupported`     | the combination cannot run (e.g. float64 on Metal), or, in a     |
|                   | probe, the framework's API lacks an op of the case (the note     |
|                   | says "not supported by <framework>" and why)                     |
| `error`           | a job failed; the summary gives its log                          |

Probes (``results/tables/probes.csv``) add outcomes a single-op check can have:

| verdict            | meaning                                                             |
| ------------------ | ------------------------------------------------------------------- |
| `reference`        | this row is the reference the others are compared with (PyTorch on |
|                    | the CPU, when the probe gives no exact values)                      |
| `known-bug`        | known bug reproduced: the values the probe file records for this    |
|                    | framework and device                                                |
| `known-bug-fixed`  | a recorded known bug is gone: the values now equal the reference    |
|                    | (update the probe file)                                             |
| `missing-gradient` | the framework gave no gradient for an input that needs one          |
| `framework-error`  | the framework raised an error; the table gives its message          |
| `non-finite`       | NaN or ±Inf where the reference is finite                           |

A known bug may record, instead of values, the outcome it has: `missing-gradient`,
`framework-error`, `non-finite`, or `wrong-values` (:data:`WRONG_VALUES`: any values beyond
the tolerance, for a bug whose values vary between runs, such as a read outside a buffer).

A probe row whose values match neither the reference nor a known bug is a `fail`; so is
one whose shape differs from the reference's (a scalar ``[]`` equals ``[1]``), and one that
returns values for a case that expects an error (``expect: error``, where the framework's
error is a `pass`). Integer quantities (argmax, argmin, argsort) pass only when equal. An
f32, f16 or bf16 row compared with PyTorch in its dtype passes within the tolerance or by
the float64-referenced rule: max|value − torch f64| ≤ m · max|torch − torch f64| + a floor
of ulps (``probe_results.fp64_check``); its note says which.

Differences and whether they are within a tolerance are ``closeness``'s (its NaN/Inf rule:
NaN and ``inf`` are never within).
"""

from __future__ import annotations

import math

from parity.compare import closeness

PASS = "pass"
FAIL = "fail"
EXPECTED_FAIL = "expected-fail"
UNEXPECTED_PASS = "unexpected-pass"
UNSUPPORTED = "unsupported"
ERROR = "error"
REFERENCE = "reference"
KNOWN_BUG = "known-bug"
KNOWN_BUG_FIXED = "known-bug-fixed"
MISSING_GRADIENT = "missing-gradient"
FRAMEWORK_ERROR = "framework-error"
NON_FINITE = "non-finite"
#: A known bug's outcome (not a verdict): values that fail the comparison, whatever they
#: are; a row with it is ``known-bug`` when its values are a ``fail`` or ``non-finite``.
WRONG_VALUES = "wrong-values"
PROBE_VERDICTS = (
    REFERENCE,
    KNOWN_BUG,
    KNOWN_BUG_FIXED,
    MISSING_GRADIENT,
    FRAMEWORK_ERROR,
    NON_FINITE,
)
VERDICTS = (PASS, FAIL, EXPECTED_FAIL, UNEXPECTED_PASS, UNSUPPORTED, ERROR, *PROBE_VERDICTS)

#: Verdicts that meet the expectation; ``check`` fails on any other. A reproduced known bug
#: is expected; a fixed one is not (the probe file is out of date).
ACCEPTED = frozenset({PASS, EXPECTED_FAIL, UNSUPPORTED, REFERENCE, KNOWN_BUG})

#: How the probe table spells a verdict for readers.
PROBE_WORDING = {KNOWN_BUG: "known bug reproduced", KNOWN_BUG_FIXED: "known bug fixed"}

#: What a comparison may expect, and the verdict that meets it.
EXPECTATIONS = {"pass": PASS, "fail": EXPECTED_FAIL}


def tolerance_verdict(worst: float, tolerance: float, expect: str) -> str:
    """Verdict of a comparison whose worst difference over all steps is ``worst``, held to
    ``tolerance`` by ``closeness.within`` (NaN and ``inf`` are never within).

    ``expect`` is ``"pass"`` (a correct pair) or ``"fail"`` (a negative control).
    Raises ``ValueError`` for another expectation.
    """
    if expect not in EXPECTATIONS:
        raise ValueError(f"expect must be one of {sorted(EXPECTATIONS)}, not {expect!r}")
    ok = closeness.within(worst, tolerance)
    if expect == "pass":
        return PASS if ok else FAIL
    return UNEXPECTED_PASS if ok else EXPECTED_FAIL


def check_verdict(ok: bool, expect: str) -> str:
    """Verdict of a yes/no criterion (e.g. the fp64-referenced rule) under ``expect``."""
    return tolerance_verdict(0.0 if ok else math.inf, 0.0, expect)


def meets_expectation(verdict: str) -> bool:
    """True for verdicts the ``check`` target accepts."""
    if verdict not in VERDICTS:
        raise ValueError(f"unknown verdict {verdict!r}")
    return verdict in ACCEPTED


def probe_verdict(
    worst: float,
    tolerance: float,
    *,
    known_bug_worst: float | None = None,
    known_bug_tolerance: float | None = None,
    non_finite: bool = False,
    fp64_pass: bool = False,
    invalid: bool = False,
) -> str:
    """Verdict of one probe quantity whose values the framework did produce.

    ``worst`` is max|value − reference| (``closeness.max_abs_diff``: ``inf`` where a NaN or
    an Inf meets a different value; NaN where the counts differ), held to ``tolerance`` by
    ``closeness.within`` (NaN and ``inf`` never are within); ``known_bug_worst`` the same
    against the values a recorded known bug produces for this framework and device, or None
    when none is recorded, held to ``known_bug_tolerance`` (default ``tolerance``; half
    precision allows the float64-referenced rule's bound); ``non_finite`` whether the
    values hold NaN or ±Inf where the reference does not; ``fp64_pass`` whether the values
    pass the float64-referenced rule (``probe_results.fp64_check``), which passes them as
    the tolerance does; ``invalid``
    whether they fail whatever their difference (a shape other than the reference's,
    non-integers in an integer quantity), though a known bug may still reproduce. Missing
    gradients, framework errors, expected errors and reference rows are decided before
    this.
    """
    if not invalid and (closeness.within(worst, tolerance) or fp64_pass):
        return PASS if known_bug_worst is None else KNOWN_BUG_FIXED
    bug_tolerance = tolerance if known_bug_tolerance is None else known_bug_tolerance
    if known_bug_worst is not None and closeness.within(known_bug_worst, bug_tolerance):
        return KNOWN_BUG
    return NON_FINITE if non_finite else FAIL


#: The criteria a comparison is judged by, with what each flags (README, "Diagnosis" and
#: "Detection power"). The verdict above is ``max_abs``; the diagnosis computes the other two.
#: A fault instance is detected by a criterion that flags it; a correct pair that a
#: criterion flags is a false alarm of that criterion.
CRITERIA = {
    "max_abs": "the worst max|dparam| over all steps exceeds the tolerance",
    "fp64_rule": "RMSE(ref64 − cand32) exceeds multiplier × RMSE(ref64 − ref32) + atol",
    "f64_rounding": "f64 vs f64 exceeds what float64 rounding explains",
}
