"""The verdict vocabulary, used by every table and by the ``check`` target; how a verdict
is reached is ``judgement`` (one ``Judgement`` for every kind of comparison).

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
| `framework-error` | a run of the comparison failed: the framework raised an error    |
|                   | during a step; the status names the run, the step and the        |
|                   | framework's message (whatever the expectation)                   |

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
of ulps (``parity.probe.fp64.fp64_check``); its note says which.

Differences and whether they are within a tolerance are ``closeness``'s (its NaN/Inf rule:
NaN and ``inf`` are never within).
"""

from __future__ import annotations

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


def meets_expectation(verdict: str) -> bool:
    """True for verdicts the ``check`` target accepts."""
    if verdict not in VERDICTS:
        raise ValueError(f"unknown verdict {verdict!r}")
    return verdict in ACCEPTED


#: The criteria a comparison is judged by, with what each flags (README, "Diagnosis" and
#: "Detection power"). A comparison's verdict is ``max_abs`` (``judgement.judge_worst``);
#: the diagnosis computes the other two. A fault instance is detected by a criterion that
#: flags it; a correct pair that a criterion flags is a false alarm of that criterion.
CRITERIA = {
    "max_abs": "the worst max|dparam| over all steps exceeds the tolerance",
    "fp64_rule": "RMSE(ref64 − cand32) exceeds multiplier × RMSE(ref64 − ref32) + atol",
    "f64_rounding": "f64 vs f64 exceeds what float64 rounding explains",
}
