"""Detection power: which criterion flags each fault instance, which flags a correct pair
(a false alarm), and the smallest learning-rate error the tolerance detects.

A *fault instance* is a deliberately wrong run compared with the clean run of the other
side (config ``faults.instances``, ``experiments.Plan.fault_comparisons``). Each
comparison is judged by the three criteria of :data:`verdicts.CRITERIA`, all computed by
the comparison jobs already: the per-step verdict (``max_abs``), the fp64-referenced rule
and the f64-vs-f64 rounding threshold (``jobs.diagnosis_job``). Nothing is recomputed
here; this module reads their results.

The sensitivity search (:func:`search`) scans one run per decade of δ, then bisects
log10 δ inside the decade where detection starts (:func:`bisect_log10`); each δ is a real
training run with lr·(1 + δ) (:func:`sensitivity_job`).

The two jobs of the ``faults`` target, :func:`detection_job` and :func:`sensitivity_job`,
are here too, as plain functions of paths like those in ``jobs``.
"""

from __future__ import annotations

import csv
import itertools
import json
import logging
import math
import os
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from . import closeness, compare, figures, tables, verdicts
from .experiments import Comparison, Plan, RunKey
from .fileio import sha256_file

#: Columns of ``results/tables/detection.csv``: one row per fault instance and device.
DETECTION_COLUMNS = (
    "fault",
    "experiment",
    "device",
    "side",
    "description",
    "pair",
    "detected",
    "detected_by",
    "first_step",
    "max_abs_step",
    "fp64_rule_step",
    "f64_rounding_step",
    "worst_dparam",
    "worst_step",
    "worst_where",
    "worst_dloss",
    "f64_f64",
    "fp64_worst_ratio",
    "tolerance",
    "bitwise_identical",
    "status",
    "verdict",
    "note",
)

#: Columns of ``results/tables/false_alarms.csv``: one row per correct pair.
FALSE_ALARM_COLUMNS = (
    "experiment",
    "comparison",
    "device",
    "pair",
    "false_alarm",
    "max_abs",
    "fp64_rule",
    "f64_rounding",
    "worst_dparam",
    "f64_f64",
    "fp64_worst_ratio",
    "f64_headroom",
    "tolerance",
)

#: Columns of ``results/tables/sensitivity.csv``: one row per training run, in run order.
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

#: What a criterion that could not be computed (no float64 runs) shows.
NOT_COMPUTED = "n/a"


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


@dataclass(frozen=True)
class CriteriaOutcome:
    """What the criteria of :data:`verdicts.CRITERIA` say about one comparison.

    ``steps`` maps each criterion of :data:`verdicts.CRITERIA` to the first step it flags,
    None when it never does, or :data:`NOT_COMPUTED` (the fp64 criteria need float64
    runs). ``flagged`` is whether it flags the comparison at all (``max_abs`` can flag
    without a step: a tolerance of 0 also refuses −0.0 against 0.0).
    """

    steps: Mapping[str, int | str | None]
    flagged: Mapping[str, bool | None]

    @property
    def by(self) -> list[str]:
        """The criteria that flag the comparison, in :data:`verdicts.CRITERIA` order."""
        return [c for c in verdicts.CRITERIA if self.flagged[c]]

    @property
    def first_step(self) -> int | None:
        """The first step any criterion flags (None when none does, or none gives a step)."""
        found = [s for s in self.steps.values() if isinstance(s, int)]
        return min(found) if found else None


def first_beyond(rows: Sequence[Mapping], tolerance: float) -> int | None:
    """First step (> 0) of a per-step table whose ``max_dparam`` is not within
    ``tolerance`` (``closeness.within``: NaN and inf never are), or None."""
    for r in rows:
        if r["step"] > 0 and not closeness.within(r["max_dparam"], tolerance):
            return r["step"]
    return None


def apply_criteria(
    perstep: Mapping, perstep_rows: Sequence[Mapping], diagnosis: Mapping | None
) -> CriteriaOutcome:
    """Apply the criteria of :data:`verdicts.CRITERIA` to one comparison, from its per-step
    result and table and its diagnosis result (None without float64 runs). Raises
    ``KeyError`` for results of another layout."""
    max_abs = perstep["verdict"] in (verdicts.FAIL, verdicts.EXPECTED_FAIL)
    steps: dict[str, int | str | None] = {
        "max_abs": first_beyond(perstep_rows, perstep["tolerance"])
    }
    flagged: dict[str, bool | None] = {"max_abs": max_abs}
    if diagnosis is None:
        for c in ("fp64_rule", "f64_rounding"):
            steps[c], flagged[c] = NOT_COMPUTED, None
    else:
        steps["fp64_rule"] = diagnosis["fp64_rule_first_fail"]
        steps["f64_rounding"] = diagnosis["f64_divergence_step"]
        for c in ("fp64_rule", "f64_rounding"):
            flagged[c] = steps[c] is not None
    return CriteriaOutcome(steps, flagged)


def _load(path: str) -> dict:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _perstep_rows(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [
            {"step": int(r["step"]), "max_dparam": float(r["max_dparam"])}
            for r in csv.DictReader(f)
        ]


def f64_headroom(diagnosis_csv: str) -> float | None:
    """How far f64 vs f64 stays below the float64-rounding threshold: the smallest ratio
    threshold / f64_f64 over the steps where f64_f64 > 0 (below 1: the criterion flags),
    from a diagnosis table; None when the float64 runs agree exactly at every step."""
    ratios = []
    with open(diagnosis_csv, encoding="utf-8") as f:
        for r in csv.DictReader(f):
            d64 = float(r["f64_f64"])
            if d64 != 0:
                ratios.append(float(r["f64_threshold"]) / d64)
    return min(ratios) if ratios else None


def _results(c: Comparison) -> tuple[dict, list[dict], dict | None, dict | None]:
    """(perstep result, perstep rows, diagnosis result or None, split result or None)."""
    diagnosis = split = None
    if c.f64_pair is not None:
        diagnosis, split = _load(c.result("diagnosis")), _load(c.result("split"))
    return _load(c.result("perstep")), _perstep_rows(c.table("perstep")), diagnosis, split


def _cell(value) -> str:
    if value is None:
        return "never"
    return str(value)


def _explain(perstep: Mapping) -> str:
    """What the data says about an undetected fault (a computed sentence, no opinion)."""
    if perstep["bitwise_identical"]:
        return (
            "the faulty run equals the clean run bit for bit at every step: the fault never fired"
        )
    return (
        f"largest difference {tables.sci(perstep['worst_dparam'])} stays within the tolerance "
        f"{perstep['tolerance']:g}; |dloss| up to {tables.sci(perstep['worst_dloss'])}"
    )


def detection_rows(plan: Plan) -> tuple[list[dict], list[dict]]:
    """(one row per fault comparison, one row per correct pair), from the result files of
    the comparison jobs (relative to the working directory)."""
    faults = {(f["experiment"], f["comparison"]): f for f in plan.faults.values()}
    rows = []
    for c in plan.fault_comparisons():
        f = faults[(c.experiment, c.name)]
        perstep, steps, diagnosis, split = _results(c)
        j = apply_criteria(perstep, steps, diagnosis)
        note = f["note"]
        if not j.by:
            note = "; ".join(filter(None, [_explain(perstep), note]))
        rows.append(
            {
                "fault": f["name"],
                "experiment": c.experiment,
                "device": c.device,
                "side": f["side"],
                "description": f["description"],
                "pair": f"{c.reference.label} vs {c.candidate.label}",
                "detected": _yes(bool(j.by)),
                "detected_by": ", ".join(j.by),
                "first_step": j.first_step,
                **{f"{k}_step": v for k, v in j.steps.items()},
                "worst_dparam": perstep["worst_dparam"],
                "worst_step": perstep["worst_step"],
                "worst_where": perstep["worst_where"],
                "worst_dloss": perstep["worst_dloss"],
                "f64_f64": None if split is None else split["worst"]["f64_f64"],
                "fp64_worst_ratio": None if diagnosis is None else diagnosis["fp64_worst_ratio"],
                "tolerance": c.tolerance,
                "bitwise_identical": perstep["bitwise_identical"],
                "status": perstep["status"],
                "verdict": perstep["verdict"],
                "note": note,
            }
        )
    alarms = []
    for c in plan.correct_pairs():
        perstep, steps, diagnosis, split = _results(c)
        j = apply_criteria(perstep, steps, diagnosis)
        flag = {k: (NOT_COMPUTED if v is None else _yes(v)) for k, v in j.flagged.items()}
        alarms.append(
            {
                "experiment": c.experiment,
                "comparison": c.name,
                "device": c.device,
                "pair": f"{c.reference.label} vs {c.candidate.label}",
                "false_alarm": _yes(bool(j.by)),
                **flag,
                "worst_dparam": perstep["worst_dparam"],
                "f64_f64": None if split is None else split["worst"]["f64_f64"],
                "fp64_worst_ratio": None if diagnosis is None else diagnosis["fp64_worst_ratio"],
                "f64_headroom": None if diagnosis is None else f64_headroom(c.table("diagnosis")),
                "tolerance": c.tolerance,
            }
        )
    return rows, alarms


def counts(rows: Sequence[Mapping], alarms: Sequence[Mapping]) -> dict[str, dict[str, int]]:
    """Per criterion (and ``any``): faults detected and correct pairs flagged, with the
    number of rows where the criterion was computed at all."""
    out = {}
    for c in (*verdicts.CRITERIA, "any"):
        if c == "any":
            hit = [r["detected"] == "yes" for r in rows]
            alarm = [a["false_alarm"] == "yes" for a in alarms]
            judged_rows, judged_alarms = len(rows), len(alarms)
        else:
            hit = [c in r["detected_by"].split(", ") for r in rows]
            alarm = [a[c] == "yes" for a in alarms]
            judged_rows = sum(r[f"{c}_step"] != NOT_COMPUTED for r in rows)
            judged_alarms = sum(a[c] != NOT_COMPUTED for a in alarms)
        out[c] = {
            "detected": sum(hit),
            "faults": judged_rows,
            "false_alarms": sum(alarm),
            "correct_pairs": judged_alarms,
        }
    return out


def _fmt_num(v) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return tables.sci(v)
    return str(v)


def _fmt_worst(v) -> str:
    # The comparison results store a non-finite difference (inf: a run diverged) as null.
    return "inf (diverged)" if v is None else tables.sci(v)


def detection_markdown(
    rows: Sequence[Mapping], alarms: Sequence[Mapping], left_out: Mapping[str, str]
) -> tuple[str, str]:
    """Markdown twins of the detection table (with the instances ``left_out`` and why) and
    of the false-alarm table."""
    n = counts(rows, alarms)
    names = {**{c: f"`{c}`" for c in verdicts.CRITERIA}, "any": "any criterion"}
    lines = ["| criterion | faults detected | false alarms on correct pairs |", "|---|---:|---:|"]
    for c, k in n.items():
        lines.append(
            f"| {names[c]} | {k['detected']} of {k['faults']} | "
            f"{k['false_alarms']} of {k['correct_pairs']} |"
        )
    criteria = [f"`{c}`: {text}" for c, text in verdicts.CRITERIA.items()]
    head = (
        "# Detection power\n\n"
        + "\n".join(f"- {c}" for c in criteria)
        + "\n- first steps: the first step each criterion flags (`never`: it does not; "
        + f"`{NOT_COMPUTED}`: no float64 runs)\n\n"
        + "\n".join(lines)
        + "\n\n"
    )
    fmt = {c: _fmt_num for c in ("worst_dloss", "f64_f64")}
    fmt["worst_dparam"] = _fmt_worst
    fmt["f64_headroom"] = lambda v: "exact" if v is None else f"{v:.3g}"
    fmt.update({c: _cell for c in ("max_abs_step", "fp64_rule_step", "f64_rounding_step")})
    fmt["fp64_worst_ratio"] = lambda v: "" if v is None else f"{v:.3g}"
    md_cols = (
        "fault",
        "experiment",
        "side",
        "description",
        "detected",
        "detected_by",
        "max_abs_step",
        "fp64_rule_step",
        "f64_rounding_step",
        "worst_dparam",
        "worst_where",
        "worst_dloss",
        "f64_f64",
        "fp64_worst_ratio",
    )
    detection = head + tables.markdown_table(rows, md_cols, fmt)
    if left_out:
        detection += (
            "\n## Left out\n\n"
            + "\n".join(f"- **{name}**: {why}" for name, why in left_out.items())
            + "\n"
        )
    undetected = [r for r in rows if r["detected"] == "no"]
    if undetected:
        detection += (
            "\n## Undetected\n\n"
            + "\n".join(f"- **{r['fault']}** ({r['experiment']}): {r['note']}" for r in undetected)
            + "\n"
        )
    alarm_cols = tuple(c for c in FALSE_ALARM_COLUMNS if c != "tolerance")
    false_alarms = (
        "# False alarms: the correct pairs under every criterion\n\n"
        + "\n".join(lines)
        + "\n\n- `f64_headroom`: the smallest ratio of the float64-rounding threshold to f64 vs "
        + "f64 over the steps (below 1 the criterion flags; `exact`: the float64 runs agree bit "
        + "for bit)\n\n"
        + tables.markdown_table(alarms, alarm_cols, fmt)
    )
    return detection, false_alarms


def detection_job(
    plan: Plan,
    out_csv: str,
    out_md: str,
    alarms_csv: str,
    alarms_md: str,
    figure_paths: Sequence[str],
    log: logging.Logger,
) -> tuple[list[dict], list[dict]]:
    """The detection table, the false-alarm table (each with its Markdown and HTML twins)
    and the detection figure, from the result files of every fault comparison and every
    correct pair. Raises ``OSError``/``KeyError`` for a missing or malformed result."""
    rows, alarms = detection_rows(plan)
    tables.write_csv(out_csv, rows, DETECTION_COLUMNS)
    tables.write_csv(alarms_csv, alarms, FALSE_ALARM_COLUMNS)
    detection_md, alarms_text = detection_markdown(rows, alarms, plan.faults_left_out)
    tables.write_twins(out_md, detection_md)
    tables.write_twins(alarms_md, alarms_text)
    figures.plot_detection(figure_paths, rows, alarms, plan.tolerance)
    for c, k in counts(rows, alarms).items():
        log.info("%s: %s", c, k)
    return rows, alarms


# ----- sensitivity: the smallest learning-rate error the tolerance detects -------------


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


def sensitivity_job(
    plan: Plan,
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
    run with lr·(1 + δ) (``Plan.perturbed_lr``), by its framework's runner, compared with
    the clean run's trace ``reference`` over every step. δ = 0 is run first: the level of
    the clean pair. Writes the table (with its twins) and the figure.

    Raises ``ValueError`` without a sensitivity setting, and what the runners and
    ``compare`` raise.
    """
    s = plan.sensitivity
    if s is None:
        raise ValueError("this config has no faults.sensitivity")
    from .jobs import open_trace

    ref = open_trace(plan, RunKey(s["experiment"], s["against"], "f32", "cpu"), reference)
    sha = sha256_file(fixture)
    with tempfile.TemporaryDirectory(prefix="sensitivity-") as tmp:

        def evaluate(delta: float) -> tuple[float, int | None, int | None]:
            variant, key = plan.perturbed_lr(delta)
            out = os.path.join(tmp, f"{len(os.listdir(tmp))}.parquet")
            if key.framework == "torch":
                from . import torch_runner

                torch_runner.train(variant, key, fixture, out, threads, log)
            else:
                from . import rust_runner

                rust_runner.train(variant, key, fixture, binary, out, threads, log, log_path)
            cand = open_trace(variant, key, out)
            compare.check_comparable([ref, cand], sha)
            rows = compare.perstep(ref, cand).rows
            worst, at = compare.worst(rows, "max_dparam")
            first = first_beyond(rows, s["tolerance"])
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
            "detected": _yes(t.detected),
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
            f"{plan.experiments[s['experiment']]['steps']} steps"
        ),
        f"detected: worst max|dparam| over all steps beyond the tolerance {s['tolerance']:g}",
        f"clean pair (δ = 0): worst {tables.sci(clean[0])}",
        verdict,
        "detection is monotone in δ over these runs: " + _yes(found.monotone),
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
        "first_step": _cell,
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
