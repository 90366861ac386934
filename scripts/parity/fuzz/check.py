"""The differential check: a batch of fuzz cases run in PyTorch (float64 and the run
dtypes, in this process) and in candle and burn (one runner invocation per :class:`Target`,
a framework's release, and dtype for the whole batch), each row judged by
``parity.probe.judge.judge_probe_row`` against PyTorch in the same dtype with the
float64-referenced rule; each failing row is a
:class:`Failure`, its ``judgement.Judgement`` with where it was found.

A case *fails* for a framework when a quantity's verdict is ``fail`` or ``non-finite``
(values beyond the rule), ``framework-error`` (where PyTorch has values) or
``missing-gradient``. ``unsupported`` is never a failure, and nothing is judged where
PyTorch itself errs. Each failure has a *kind*: ``forward``, ``input gradient``,
``weight gradient`` (an input after the first of a conv, linear or layer_norm), ``error``,
``missing gradient``.

:func:`control` is the check of the checker: PyTorch float32 through the case's layout
routes against PyTorch float32 on contiguous inputs (gradients carried back through each
route by ``generate.route_adjoint``); it must find nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import NamedTuple

import numpy as np

from parity.compare import verdicts
from parity.compare.judgement import Judgement
from parity.fuzz.generate import WEIGHTED_OPS, Case, Route, input_name, to_probe
from parity.probe.format import Probe
from parity.probe.judge import judge_probe_row
from parity.probe.plan import ProbeKey
from parity.probe.results import OK, Outcome

FORWARD, INPUT_GRAD, WEIGHT_GRAD = "forward", "input gradient", "weight gradient"
ERROR, MISSING_GRAD = "error", "missing gradient"
KINDS = (FORWARD, INPUT_GRAD, WEIGHT_GRAD, ERROR, MISSING_GRAD)
FAILING = frozenset(
    {verdicts.FAIL, verdicts.NON_FINITE, verdicts.FRAMEWORK_ERROR, verdicts.MISSING_GRADIENT}
)


class Target(NamedTuple):
    """What one runner binary runs: a ``framework`` at a ``release`` ("" where the
    campaign does not say which)."""

    framework: str
    release: str = ""

    def label(self) -> str:
        """``candle 0.11.1`` (the framework alone without a release)."""
        return f"{self.framework} {self.release}".strip()


def targets(given: Sequence[Target | str | Sequence[str]]) -> list[Target]:
    """Targets from ``Target``s, bare framework names or (framework, release) pairs."""
    return [Target(t) if isinstance(t, str) else Target(*t) for t in given]


@dataclass(frozen=True)
class Failure(Judgement):
    """One failing (framework, release, dtype, quantity) of a case: the probe judgement of
    that row (``verdict``, ``worst``, ``where``, ``tolerance``, and its note or the
    framework's error as ``message``) with the failure's ``kind``; ``values``/``reference``
    the framework's and PyTorch's values in the run dtype (None for an error),
    ``reference64`` PyTorch float64's."""

    framework: str = ""
    dtype: str = ""
    quantity: str = ""
    kind: str = ""
    values: tuple | None = None
    reference: tuple | None = None
    reference64: tuple | None = None
    release: str = ""

    @property
    def signature(self) -> tuple[str, str, str, str]:
        """(framework, release, dtype, kind): what shrinking keeps."""
        return (self.framework, self.release, self.dtype, self.kind)


#: A checker: named cases → failures by name (every name present, [] when it passes).
Checker = Callable[[Sequence[tuple[str, Case]]], dict[str, list[Failure]]]


def kind_of(op: str, quantity: str, verdict: str) -> str:
    """The kind of a failing quantity of ``op``."""
    if verdict == verdicts.FRAMEWORK_ERROR:
        return ERROR
    if verdict == verdicts.MISSING_GRADIENT:
        return MISSING_GRAD
    if quantity == "y":
        return FORWARD
    if quantity != f"{input_name(0)}.grad" and op in WEIGHTED_OPS:
        return WEIGHT_GRAD
    return INPUT_GRAD


@dataclass
class Runners:
    """How to run each framework: Rust runner binaries by :class:`Target` (a bare
    framework name stands for its target without a release), threads, a logger, the
    runners' log file (or None) and, by target as ``binaries``, the identity each binary's
    build record must hold (``builds``: its name and source id, ``parity.plan.builds``;
    a target without one is held to its record's own name only)."""

    binaries: Mapping[Target | str, str]
    threads: int = 1
    log: logging.Logger = field(default_factory=lambda: logging.getLogger("fuzz"))
    log_path: str | None = None
    builds: Mapping[Target | str, Mapping[str, str] | None] = field(default_factory=dict)

    def torch(self, probes: Sequence[Probe], dtype: str) -> dict[str, list[Outcome]]:
        """PyTorch outcomes of every probe in ``dtype`` on the CPU, by probe name."""
        from parity.probe import torch as probe_torch

        quiet = logging.getLogger("fuzz.quiet")
        quiet.setLevel(logging.WARNING)
        return {p.name: probe_torch.run(p, dtype, "cpu", self.threads, quiet) for p in probes}

    def rust(
        self, probes: Sequence[Probe], target: Target | str, dtype: str
    ) -> dict[str, list[Outcome]]:
        """One invocation of ``target``'s runner for every probe: outcomes by probe name."""
        from parity.probe import rust as rust_probe

        (target,) = targets([target])
        quiet = logging.getLogger("fuzz.quiet")
        quiet.setLevel(logging.WARNING)
        binary = self.binaries.get(target) or self.binaries[target.framework]
        build = self.builds.get(target) or self.builds.get(target.framework)
        rows = rust_probe.run_batch(
            probes,
            target.framework,
            dtype,
            "cpu",
            binary,
            self.threads,
            quiet,
            self.log_path,
            build,
        )
        return {name: outcomes for name, outcomes, _ in rows}


def judge(
    probe: Probe,
    op: str,
    framework: str,
    dtype: str,
    outcomes: Sequence[Outcome],
    reference: Sequence[Outcome],
    reference64: Sequence[Outcome],
    release: str = "",
) -> list[Failure]:
    """The failures of one framework's (at ``release``) ``outcomes`` of ``probe`` (its one
    case), against PyTorch in ``dtype`` and in float64 (same order:
    ``Probe.quantities``)."""
    out = []
    for o, r, r64 in zip(outcomes, reference, reference64, strict=True):
        if r.status != OK:
            continue
        key = ProbeKey(probe.name, framework, dtype, "cpu")
        j = judge_probe_row(probe, key, o, r, r64 if dtype != "f64" else r)
        if j.verdict not in FAILING:
            continue
        vals = None if o.values is None else tuple(float(v) for v in o.values)
        out.append(
            Failure(
                j.verdict,
                j.worst,
                j.where,
                j.tolerance,
                j.message or (o.message or ""),
                framework=framework,
                dtype=dtype,
                quantity=o.quantity,
                kind=kind_of(op, o.quantity, j.verdict),
                values=vals,
                reference=tuple(float(v) for v in r.values),
                reference64=None if r64.status != OK else tuple(float(v) for v in r64.values),
                release=release,
            )
        )
    return out


def run_check(
    cases: Sequence[tuple[str, Case]],
    runners: Runners,
    frameworks: Sequence[Target | str],
    dtypes: Sequence[str],
) -> dict[str, list[Failure]]:
    """Run named ``cases`` in PyTorch (float64 and ``dtypes``) and every target of
    ``frameworks`` (:class:`Target`, or a bare framework name) in ``dtypes``; the failures
    of each case by name. Raises ``probes.ProbeError`` for a case that is no valid probe
    and ``RunnerError`` when a runner fails outside any case."""
    if not cases:
        return {}
    probes = [to_probe(n, c) for n, c in cases]
    ops = {n: c.op for n, c in cases}
    torch = {d: runners.torch(probes, d) for d in sorted({"f64", *dtypes})}
    found: dict[str, list[Failure]] = {n: [] for n, _ in cases}
    for target in targets(frameworks):
        for dtype in dtypes:
            got = runners.rust(probes, target, dtype)
            for p in probes:
                found[p.name] += judge(
                    p,
                    ops[p.name],
                    target.framework,
                    dtype,
                    got[p.name],
                    torch[dtype][p.name],
                    torch["f64"][p.name],
                    target.release,
                )
    return found


def contiguous(case: Case) -> Case:
    """The same logical inputs with no layout route (leaves stored as the op sees them)."""
    inputs = []
    for inp in case.inputs:
        values = tuple(float(v) for v in np.ascontiguousarray(inp.logical()).reshape(-1))
        inputs.append(replace(inp, route=Route(), stored_shape=inp.shape, stored=values))
    return case.with_inputs(inputs)


def control(
    cases: Sequence[tuple[str, Case]], runners: Runners, dtype: str = "f32"
) -> dict[str, list[Failure]]:
    """PyTorch against itself: each case's quantities in ``dtype`` through its routes (the
    reference, with float64 through the same routes) against the contiguous case
    (framework label ``torch-contiguous``), its input gradients carried back through each
    route. Returns the failures by case name (expected: none)."""
    from parity.fuzz.generate import route_adjoint

    routed = [to_probe(n, c) for n, c in cases]
    flat = [to_probe(n, contiguous(c)) for n, c in cases]
    ref = runners.torch(routed, dtype)
    ref64 = runners.torch(routed, "f64")
    got = runners.torch(flat, dtype)
    found: dict[str, list[Failure]] = {}
    for (name, case), p in zip(cases, routed, strict=True):
        mapped = []
        for o in got[name]:
            base, _, suffix = o.quantity.partition(".")
            if o.status != OK or not suffix:
                mapped.append(o)
                continue
            inp = case.inputs[int(base[1:])]
            g = route_adjoint(inp.route, o.values.reshape(inp.shape), inp.stored_shape)
            mapped.append(Outcome.ok(o.case, o.quantity, g.reshape(-1), inp.stored_shape))
        found[name] = judge(p, case.op, "torch-contiguous", dtype, mapped, ref[name], ref64[name])
    return found
