"""Judging: how a verdict is reached, once for every kind of comparison.

As ``torch/testing/_comparison.py`` gives PyTorch one ``Pair`` interface (one ``compare()``
per kind of input, one message builder, one carrier of where a mismatch is), every judging
function of this project returns one :class:`Judgement`: a reference, a candidate and a
tolerance in, and out the verdict (a word of ``verdicts``), the worst difference
(``closeness.max_abs_diff``'s rule: never NaN, ``inf`` for a NaN or an Inf against another
value), where it is (``name[flat index]``), the absolute tolerance it was held to and a
message saying why. A verdict is always reached the same way:

1. **measure**: the largest |candidate − reference| and where (``closeness``);
2. **hold** it to the tolerance: within it (``closeness.within``; NaN and ``inf`` never are)
   is ``pass``, beyond it ``fail``;
3. **expect**: under a negative control's expectation (``expect: fail``) a ``fail`` is an
   ``expected-fail`` and a ``pass`` an ``unexpected-pass`` (:func:`expecting`);
4. **describe**: the message is ``closeness``'s (``mismatched elements: …, greatest absolute
   difference: … at … (up to … allowed)``).

Each kind keeps the extra fields it needs in a subclass and adds only its own rules:

* a **training comparison** (the per-step job, the cross-host table): :func:`judge_worst` of
  the worst max|dparam| over the steps, or :func:`judge_check` of bit-for-bit identity
  where the tolerance is 0, or :func:`judge_failed_runs` where a run failed; a plain
  :class:`Judgement`;
* a **probe quantity** (``parity.probe.judge.judge_probe_row``): the reference chosen, the
  shape checked, the values judged by :func:`judge` (or passed by the float64-referenced
  rule), then the known bug matched; a ``ProbeJudgement`` with the reference's values;
* a **localised quantity** (``parity.localise.walk.judge``): held to rounding rather than to
  a tolerance (the fp64-referenced rule and the float64 split), ``pass`` where it agrees
  and ``fail`` where it differs; a ``QuantityJudgement`` with the rules' measures;
* a **fuzz case** (``parity.fuzz.check.judge``): a probe judgement per quantity, the failing
  ones kept as ``Failure`` (a judgement with the framework, dtype and kind).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from parity.compare import closeness
from parity.compare.verdicts import (
    EXPECTATIONS,
    EXPECTED_FAIL,
    FAIL,
    FRAMEWORK_ERROR,
    PASS,
    UNEXPECTED_PASS,
    meets_expectation,
)


@dataclass(frozen=True)
class Judgement:
    """The outcome of one comparison of a candidate with its reference.

    ``verdict`` is a word of ``verdicts.VERDICTS``; ``worst`` the largest absolute
    difference (float64, ``closeness``'s rule; None where nothing was measured); ``where``
    its location, ``name[flat index]`` in PyTorch layout (``""`` where nothing was
    measured); ``tolerance`` the absolute tolerance it was held to (None where none
    applies); ``message`` why, in words (``""`` for a plain pass)."""

    verdict: str
    worst: float | None = None
    where: str = ""
    tolerance: float | None = None
    message: str = ""

    @property
    def accepted(self) -> bool:
        """Whether the verdict meets its expectation (``verdicts.meets_expectation``, what
        the ``check`` target accepts)."""
        return meets_expectation(self.verdict)


def judge(
    reference: Mapping[str, np.ndarray],
    candidate: Mapping[str, np.ndarray],
    tolerance: float,
    names: Sequence[str] | None = None,
) -> Judgement:
    """The candidate's values against the reference's under an absolute ``tolerance``.

    ``reference[name]`` and ``candidate[name]`` are arrays of any float dtype and of equal
    size, read flat (row-major), for every name of ``names`` (default: the reference's, in
    order; not empty). ``worst`` and ``where`` are ``closeness.max_abs_diff``'s; the verdict
    is ``pass`` when it is ``closeness.within`` the tolerance, else ``fail`` with
    ``closeness.mismatch_message`` as the message. Raises ``ValueError`` when the sizes of a
    name differ (values of different sizes have no difference: check them first).
    """
    names = list(reference) if names is None else list(names)
    d = closeness.max_abs_diff(candidate, reference, names)
    if closeness.within(d.value, tolerance):
        return Judgement(PASS, d.value, d.where, tolerance)
    message = closeness.mismatch_message(candidate, reference, names, tolerance)
    return Judgement(FAIL, d.value, d.where, tolerance, message)


def expecting(judgement: Judgement, expect: str) -> Judgement:
    """``judgement`` (verdict ``pass`` or ``fail``) under ``expect``: ``"pass"`` (a correct
    pair) leaves it as it is; ``"fail"`` (a negative control) makes a ``fail`` an
    ``expected-fail`` and a ``pass`` an ``unexpected-pass``. Raises ``ValueError`` for
    another expectation."""
    if expect not in EXPECTATIONS:
        raise ValueError(f"expect must be one of {sorted(EXPECTATIONS)}, not {expect!r}")
    if expect == "pass":
        return judgement
    return replace(
        judgement, verdict=UNEXPECTED_PASS if judgement.verdict == PASS else EXPECTED_FAIL
    )


def judge_worst(worst: float, where: str, tolerance: float, expect: str = "pass") -> Judgement:
    """A comparison whose worst difference is already measured (a training comparison's
    largest max|dparam| over its steps, ``worst`` at ``where``), held to the absolute
    ``tolerance`` (0 demands equal values) under ``expect`` (:func:`expecting`). NaN and
    ``inf`` are never within a tolerance. Raises ``ValueError`` for an unknown
    expectation."""
    if closeness.within(worst, tolerance):
        return expecting(Judgement(PASS, worst, where, tolerance), expect)
    message = closeness.difference_message(worst, where, tolerance)
    return expecting(Judgement(FAIL, worst, where, tolerance, message), expect)


def judge_failed_runs(failed: Sequence[Mapping], tolerance: float | None = None) -> Judgement:
    """A comparison one of whose runs failed (``maths.failures``: the framework raised an
    error during a step): ``framework-error`` whatever the expectation (a negative control
    whose run failed has not shown its fault), the message naming each failed run, its
    step and the framework's message."""
    return Judgement(
        FRAMEWORK_ERROR, tolerance=tolerance, message="; ".join(f["message"] for f in failed)
    )


def judge_check(ok: bool, expect: str = "pass", message: str = "") -> Judgement:
    """A yes/no criterion (bit-for-bit identity where the tolerance is 0, the
    fp64-referenced rule over a run) under ``expect`` (:func:`expecting`); ``message``
    says what was checked. Raises ``ValueError`` for an unknown expectation."""
    return expecting(Judgement(PASS if ok else FAIL, message=message), expect)
