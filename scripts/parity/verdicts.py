"""The verdict vocabulary, used by every table and by the ``check`` target.

| verdict           | meaning                                                          |
| ----------------- | ---------------------------------------------------------------- |
| `pass`            | within tolerance, as expected                                    |
| `fail`            | beyond tolerance where a pass was expected                       |
| `expected-fail`   | a control that must fail did fail: the harness can see the fault |
| `unexpected-pass` | a control passed: the harness has lost its power (an error)      |
| `unsupported`     | the combination cannot run (e.g. float64 on Metal)               |
| `error`           | a job failed; the summary gives its log                          |
"""

from __future__ import annotations

import math

PASS = "pass"
FAIL = "fail"
EXPECTED_FAIL = "expected-fail"
UNEXPECTED_PASS = "unexpected-pass"
UNSUPPORTED = "unsupported"
ERROR = "error"
VERDICTS = (PASS, FAIL, EXPECTED_FAIL, UNEXPECTED_PASS, UNSUPPORTED, ERROR)

#: Verdicts that meet the expectation; ``check`` fails on any other.
ACCEPTED = frozenset({PASS, EXPECTED_FAIL, UNSUPPORTED})

#: What a comparison may expect, and the verdict that meets it.
EXPECTATIONS = {"pass": PASS, "fail": EXPECTED_FAIL}


def within(worst: float, tolerance: float) -> bool:
    """Whether the worst difference is at most ``tolerance``. NaN is never within."""
    return not math.isnan(worst) and worst <= tolerance


def judge(worst: float, tolerance: float, expect: str) -> str:
    """Verdict of a comparison whose worst difference over all steps is ``worst``.

    ``expect`` is ``"pass"`` (a correct pair) or ``"fail"`` (a negative control).
    Raises ``ValueError`` for another expectation.
    """
    if expect not in EXPECTATIONS:
        raise ValueError(f"expect must be one of {sorted(EXPECTATIONS)}, not {expect!r}")
    ok = within(worst, tolerance)
    if expect == "pass":
        return PASS if ok else FAIL
    return UNEXPECTED_PASS if ok else EXPECTED_FAIL


def judge_ok(ok: bool, expect: str) -> str:
    """Verdict of a yes/no criterion (e.g. the fp64-referenced rule) under ``expect``."""
    return judge(0.0 if ok else math.inf, 0.0, expect)


def meets_expectation(verdict: str) -> bool:
    """True for verdicts the ``check`` target accepts."""
    if verdict not in VERDICTS:
        raise ValueError(f"unknown verdict {verdict!r}")
    return verdict in ACCEPTED
