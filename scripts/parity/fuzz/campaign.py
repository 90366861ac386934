"""One fuzz campaign: generate, check, run the control, shrink each failure, merge.

:func:`campaign` is what the ``fuzz`` job runs; everything it needs to run the frameworks
is a ``check.Runners``. Findings are merged when their minimal cases are the same *layout
class*: op, framework, release, dtype, kind and per input the route's step kinds (the minimal case
kept is the smallest of the class, by ``shrink.size``); each names every generated case
it came from.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from parity.fuzz import check, generate, shrink

log = logging.getLogger("fuzz")


@dataclass
class Finding:
    """A minimal failing case: ``op``, ``framework``, ``dtype``, ``kind``, the failures of
    that signature on the minimal case (their quantities, values and PyTorch's), the
    generated cases it was shrunk from, the candidates shrinking ran, and the framework's
    ``release`` it fails in ("" where the campaign names none)."""

    op: str
    framework: str
    dtype: str
    kind: str
    case: generate.Case
    failures: list[check.Failure]
    sources: list[str] = field(default_factory=list)
    shrink_runs: int = 0
    #: Every failure of the minimal case, of every framework (for the probe's known_bug).
    all_failures: list[check.Failure] = field(default_factory=list)
    #: (framework, release, quantity) whose values differed between two runs of the
    #: minimal case (a read outside the tensor's memory): no values are recorded for them.
    unstable: set[tuple[str, str, str]] = field(default_factory=set)
    release: str = ""

    @property
    def layout(self) -> tuple[tuple[str, ...], ...]:
        """Per input, the minimal route's step kinds (empty: contiguous)."""
        return tuple(tuple(i.route.kinds()) for i in self.case.inputs)

    @property
    def key(self) -> tuple:
        """The layout class findings are merged by."""
        return (self.op, self.framework, self.release, self.dtype, self.kind, self.layout)


@dataclass
class Campaign:
    """What a campaign found: findings (sorted by op, framework, kind, layout), the
    control's failures, counts and wall times (seconds) of each phase."""

    findings: list[Finding]
    control_failures: dict[str, list[check.Failure]]
    cases: int
    failing_cases: int
    seconds: dict[str, float]
    #: (op, framework, release, dtype, kind) → generated cases failing that way (before
    #: shrinking).
    failing_by_signature: dict[tuple, int] = field(default_factory=dict)


def _batches(items: Sequence, n: int):
    for i in range(0, len(items), n):
        yield items[i : i + n]


def unstable(first: Sequence[check.Failure], second: Sequence[check.Failure]) -> set:
    """(framework, release, quantity) of the failures whose values or verdict differ
    between two runs of the same case."""
    seen = {(f.framework, f.release, f.quantity): (f.verdict, f.values) for f in second}
    return {
        (f.framework, f.release, f.quantity)
        for f in first
        if seen.get((f.framework, f.release, f.quantity)) != (f.verdict, f.values)
    }


def campaign(
    seed: int,
    ops: Sequence[str],
    cases_per_op: int,
    frameworks: Sequence[check.Target | str],
    dtypes: Sequence[str],
    runners: check.Runners,
    batch: int = 400,
    shrinks_per_class: int = 2,
    rounds: int = 60,
) -> Campaign:
    """Run a campaign: ``cases_per_op`` cases of each op of ``ops`` from ``seed``, checked
    in batches of ``batch`` cases against every target of ``frameworks`` (a framework's
    release, ``check.Target``, or a bare framework name) in every dtype; the control on
    the same cases; then per failing case and signature (framework, release, dtype, kind),
    at most ``shrinks_per_class`` shrinks per (op, signature, original routes' step kinds),
    each of at most ``rounds`` rounds, run against that target and dtype only; the minimal
    case then runs twice with every target, the second time after the original case in
    the same process (its failures, and which are unstable)."""
    frameworks = check.targets(frameworks)
    t0 = time.monotonic()
    cases = generate.generate(seed, ops, cases_per_op)
    by_name = dict(cases)
    failures: dict[str, list[check.Failure]] = {}
    control: dict[str, list[check.Failure]] = {}
    for chunk in _batches(cases, batch):
        failures.update(check.run_check(chunk, runners, frameworks, dtypes))
        control.update(check.control(chunk, runners))
    t1 = time.monotonic()
    failing = [n for n, fs in failures.items() if fs]
    log.info(
        "%d cases, %d failing; control: %d failing",
        len(cases),
        len(failing),
        sum(1 for v in control.values() if v),
    )
    counts: dict[tuple, int] = {}
    for name in failing:
        for sig in {f.signature for f in failures[name]}:
            counts[(by_name[name].op, *sig)] = counts.get((by_name[name].op, *sig), 0) + 1
    tried: dict[tuple, int] = {}
    merged: dict[tuple, Finding] = {}
    for name in failing:
        case = by_name[name]
        for sig in sorted({f.signature for f in failures[name]}):
            fw, release, dtype, kind = sig
            klass = (case.op, sig, tuple(tuple(i.route.kinds()) for i in case.inputs))
            if tried.get(klass, 0) >= shrinks_per_class:
                continue
            tried[klass] = tried.get(klass, 0) + 1

            def checker(named, fw=fw, release=release, dtype=dtype):
                return check.run_check(named, runners, [check.Target(fw, release)], [dtype])

            small, ran = shrink.shrink(name, case, sig, checker, rounds)
            # Twice, the second time after the original case in the same runner process:
            # alone, a fresh process allocates the same way each time, so memory read
            # outside a tensor can hold the same garbage twice and look stable, and then
            # differ when the probe file runs in a batch with other probes.
            final = check.run_check([(f"{name}_min", small)], runners, frameworks, [dtype])
            final = final[f"{name}_min"]
            again = check.run_check(
                [(f"{name}_pre", case), (f"{name}_min", small)], runners, frameworks, [dtype]
            )[f"{name}_min"]
            kept = [f for f in final if f.signature == sig]
            if not kept:
                log.warning("%s: the shrunk case no longer fails (%s); skipped", name, sig)
                continue
            found = Finding(
                case.op,
                fw,
                dtype,
                kind,
                small,
                kept,
                [name],
                ran,
                final,
                unstable(final, again),
                release,
            )
            old = merged.get(found.key)
            if old is None:
                merged[found.key] = found
            else:
                keep = found if shrink.size(small) < shrink.size(old.case) else old
                keep.sources = sorted({*old.sources, name})
                keep.shrink_runs = old.shrink_runs + ran if keep is found else old.shrink_runs
                merged[found.key] = keep
            log.info("%s %s → %s %s", name, sig, found.layout, shrink.size(small))
    t2 = time.monotonic()
    findings = sorted(
        merged.values(), key=lambda f: (f.op, f.framework, f.kind, f.layout, f.release)
    )
    return Campaign(
        findings,
        {n: v for n, v in control.items() if v},
        len(cases),
        len(failing),
        {"check": t1 - t0, "shrink": t2 - t1, "total": t2 - t0},
        counts,
    )
