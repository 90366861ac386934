"""The smallest learning-rate error the tolerance detects (config ``faults.sensitivity``).

The search (:func:`search`) scans one run per decade of δ, then bisects log10 δ inside the
decade where detection starts (:func:`bisect_log10`); each δ is a real training run with
lr·(1 + δ) (:func:`sensitivity`), compared with the clean run over every step.
"""

from __future__ import annotations

import itertools
import logging
import math
import os
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from parity.compare import closeness
from parity.compare import maths as compare
from parity.core.fileio import sha256_file
from parity.detection.table import step_cell, yes_no
from parity.plan.faults import perturbed_settings
from parity.plan.keys import RunKey, trace_expectation
from parity.render import figures, tables
from parity.trace.reader import TraceReader

SENSITIVITY_COLUMNS = (
    "phase",
    "delta",
    "log10_delta",
    "lr",
    "lr_f32",
    "delta_f32",
    "worst_dparam",
    "worst_step",
    "first_step",
    "detected",
)


@dataclass(frozen=True)
class Trial:
    """One training run of the sensitivity search."""

    phase: str  # "clean" (δ = 0), "scan" (one per decade) or "bisection"
    delta: float
    worst: float  # worst max|dparam| over all steps against the clean run
    worst_step: int | None
    first_step: int | None  # first step beyond the tolerance
    detected: bool


@dataclass(frozen=True)
class Search:
    """Outcome of :func:`search`: every trial in run order, and the bracket on log10 δ —
    (largest exponent found undetected, smallest found detected) — or None where the
    scanned range does not contain the threshold. ``monotone``: no undetected δ above a
    detected one among the trials (bisection assumes it)."""

    trials: list[Trial]
    bracket: tuple[float, float] | None
    monotone: bool

    @property
    def threshold(self) -> float | None:
        """The smallest δ found detected (10 ** upper end of the bracket)."""
        return None if self.bracket is None else 10.0 ** self.bracket[1]


def bisect_log10(
    detected: Callable[[float], bool], lo: float, hi: float, steps: int
) -> tuple[float, float]:
    """Narrow the bracket ``(lo, hi)`` on log10 δ — δ = 10**lo not detected, 10**hi
    detected — by ``steps`` halvings at the midpoint of the exponents. Assumes detection
    is monotone in δ between them; returns the final (lo, hi)."""
    for _ in range(steps):
        mid = (lo + hi) / 2
        if detected(10.0**mid):
            hi = mid
        else:
            lo = mid
    return lo, hi


def search(
    evaluate: Callable[[float], tuple[float, int | None, int | None]],
    tolerance: float,
    log10_range: Sequence[int],
    bisections: int,
) -> Search:
    """Scan δ = 10**k for each integer k in ``log10_range`` (inclusive), then bisect on
    log10 δ between the smallest detected decade and the one below it.

    ``evaluate(δ)`` trains and returns (worst max|dparam|, its step, first step beyond the
    tolerance); δ is detected when the worst is not within ``tolerance``
    (``closeness.within``). No bisection when the smallest decade is already detected or
    none is.
    """
    trials: list[Trial] = []

    def detected(phase: str, delta: float) -> bool:
        worst, at, first = evaluate(delta)
        hit = not closeness.within(worst, tolerance)
        trials.append(Trial(phase, delta, worst, at, first, hit))
        return hit

    lo, hi = log10_range
    scan = {k: detected("scan", 10.0**k) for k in range(lo, hi + 1)}
    hits = [k for k, hit in scan.items() if hit]
    bracket = None
    if hits and hits[0] > lo:
        bracket = bisect_log10(
            lambda d: detected("bisection", d), float(hits[0] - 1), float(hits[0]), bisections
        )
    ordered = sorted(trials, key=lambda t: t.delta)
    monotone = all(not a.detected or b.detected for a, b in itertools.pairwise(ordered))
    return Search(trials, bracket, monotone)


def sensitivity(
    s: Mapping,
    reference: str,
    fixture: str,
    binary: str | None,
    out_csv: str,
    out_md: str,
    figure_paths: Sequence[str],
    threads: int,
    log: logging.Logger,
    log_path: str | None = None,
) -> Search:
    """Search the smallest relative learning-rate error δ that the tolerance detects
    (config ``faults.sensitivity``): each δ is a real float32 CPU run of the sensitivity
    run with lr·(1 + δ) (``faults.perturbed_settings``), as run ``<run>_sensitivity``, by
    its framework's runner, compared with the clean run's trace ``reference`` over every
    step. δ = 0 is run first: the level of the clean pair. Writes the table (with its
    twins) and the figure. ``s`` is the resolved setting (``faults.resolve_sensitivity``);
    as the job's param (``Plan.sensitivity_params``) it also holds ``build``, what the
    perturbed runs' binary's build record must hold (``rust.check_binary``: another build's
    binary copied in with its record is refused before it runs), and
    ``reference_expectation``, what the clean trace must carry, its runner source id
    included (without them: the trace's expectation without a source id, no build).

    Raises what the runners and ``compare`` raise.
    """
    e = s["experiment"]
    ref_key = RunKey(e, s["against"], "f32", "cpu")
    # the job's params (Plan.sensitivity_params): the clean trace's full expectation, with
    # the runner source id of a Rust run, and the identity the perturbed runs' binary must have
    expect = s.get("reference_expectation") or trace_expectation(ref_key, s["against_settings"])
    build = s.get("build")
    ref = TraceReader(reference, expect=expect)
    sha = sha256_file(fixture)
    key = RunKey(e, f"{s['run']}_sensitivity", "f32", "cpu")
    with tempfile.TemporaryDirectory(prefix="sensitivity-") as tmp:

        def evaluate(delta: float) -> tuple[float, int | None, int | None]:
            settings = perturbed_settings(s["settings"], delta)
            out = os.path.join(tmp, f"{len(os.listdir(tmp))}.parquet")
            if key.framework == "torch":
                from parity.train import torch as torch_runner

                torch_runner.train(key, settings, fixture, out, threads, log)
            else:
                from parity.train import rust as rust_runner

                rust_runner.train(
                    key, settings, fixture, binary, out, threads, log, log_path, build
                )
            want = trace_expectation(key, settings)
            if build:
                want["runner_source_id"] = build["source_id"]
            cand = TraceReader(out, expect=want)
            compare.check_comparable([ref, cand], sha)
            rows = compare.perstep(ref, cand).rows
            worst, at = compare.worst(rows, "max_dparam")
            beyond = compare.first_beyond(rows, s["tolerance"])
            first = beyond and beyond["step"]
            log.info("delta %.3e: worst %s at step %s", delta, worst, at)
            return worst, at, first

        clean = evaluate(0.0)
        found = search(evaluate, s["tolerance"], s["log10_range"], s["bisections"])
    trials = [Trial("clean", 0.0, *clean, not closeness.within(clean[0], s["tolerance"]))]
    trials += found.trials
    rows = [
        {
            "phase": t.phase,
            "delta": t.delta,
            "log10_delta": math.log10(t.delta) if t.delta > 0 else None,
            "lr": s["lr"] * (1 + t.delta),
            "lr_f32": float(np.float32(s["lr"] * (1 + t.delta))),
            "delta_f32": float(np.float32(s["lr"] * (1 + t.delta))) / float(np.float32(s["lr"]))
            - 1,
            "worst_dparam": t.worst,
            "worst_step": t.worst_step,
            "first_step": t.first_step,
            "detected": yes_no(t.detected),
        }
        for t in trials
    ]
    tables.write_csv(out_csv, rows, SENSITIVITY_COLUMNS)
    if found.bracket is None:
        hits = [t for t in found.trials if t.detected]
        verdict = (
            f"detected at every δ scanned (from 10^{s['log10_range'][0]})"
            if hits
            else f"not detected up to δ = 10^{s['log10_range'][1]}"
        )
    else:
        a, b = found.bracket
        verdict = (
            f"smallest δ detected: **{10.0**b:.3g}** (10^{b:.4g}); largest δ not detected: "
            f"{10.0**a:.3g} (10^{a:.4g})"
        )
    notes = [
        (
            f"{s['experiment']}: run `{s['run']}` with lr·(1 + δ), lr = {s['lr']:g}, against "
            f"`{s['against']}`, float32 on the CPU, "
            f"{s['steps']} steps"
        ),
        f"detected: worst max|dparam| over all steps beyond the tolerance {s['tolerance']:g}",
        f"clean pair (δ = 0): worst {tables.sci(clean[0])}",
        verdict,
        "detection is monotone in δ over these runs: " + yes_no(found.monotone),
        (
            "`lr_f32`: lr·(1 + δ) rounded to float32, `delta_f32` its relative error against "
            "lr rounded to float32; candle's float32 AdamW multiplies by its learning rate in "
            "float32 (a scalar takes the tensor's dtype), so there δ only counts as `delta_f32`"
        ),
        (
            f"{len(trials)} runs: δ = 0, one per decade 10^{s['log10_range'][0]} … "
            f"10^{s['log10_range'][1]}, then {s['bisections']} bisections of log10 δ"
        ),
    ]
    fmt = {
        "delta": lambda v: f"{v:.4g}",
        "log10_delta": lambda v: "" if v is None else f"{v:.4g}",
        "lr": lambda v: repr(v),
        "lr_f32": lambda v: repr(v),
        "delta_f32": lambda v: f"{v:.4g}",
        "worst_dparam": tables.sci,
        "first_step": step_cell,
    }
    tables.write_twins(
        out_md,
        "# Learning-rate sensitivity\n\n"
        + "\n".join(f"- {n}" for n in notes)
        + "\n\n"
        + tables.markdown_table(rows, SENSITIVITY_COLUMNS, fmt),
    )
    figures.plot_sensitivity(
        figure_paths,
        trials,
        s["tolerance"],
        found.bracket,
        f"{s['experiment']}: lr·(1 + δ) in {s['run']} against {s['against']}",
    )
    log.info("sensitivity: %s", verdict)
    return Search(trials, found.bracket, found.monotone)
