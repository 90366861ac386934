"""Detection power: which criterion flags each fault instance, and which flags a correct
pair (a false alarm).

A *fault instance* is a deliberately wrong run compared with the clean run of the other
side (config ``faults.instances``, ``plan.Plan.fault_comparisons``). Each
comparison is judged by the three criteria of :data:`verdicts.CRITERIA`, all computed by
the comparison jobs already: the per-step verdict and first step beyond the tolerance
(``max_abs``, ``compare.job.perstep_job``), the fp64-referenced rule and the f64-vs-f64
rounding threshold (``compare.job.float64_job``). Nothing is recomputed here; this
module reads their results. The learning-rate sensitivity search is
:mod:`parity.detection.sensitivity`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from parity.compare import verdicts
from parity.core import integrity
from parity.plan.keys import Comparison
from parity.render import figures, tables
from parity.render.markdown import md_text

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
    "expected_site",
    "found_site",
    "site_found",
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
    "culprit",
    "tolerance",
)

#: Columns of ``results/tables/sensitivity.csv``: one row per training run, in run order.
#: What a criterion that could not be computed (no float64 runs) shows.
NOT_COMPUTED = "n/a"


def yes_no(flag: bool) -> str:
    """A flag as the tables write it: ``yes`` or ``no``."""
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


def apply_criteria(perstep: Mapping, diagnosis: Mapping | None) -> CriteriaOutcome:
    """Apply the criteria of :data:`verdicts.CRITERIA` to one comparison, from its per-step
    result (whose first step beyond the tolerance the per-step job stored) and its
    diagnosis result (None without float64 runs). Raises ``KeyError`` for results of
    another layout."""
    max_abs = perstep["verdict"] in (verdicts.FAIL, verdicts.EXPECTED_FAIL)
    steps: dict[str, int | str | None] = {"max_abs": perstep["tol_exceeded_step"]}
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
    return integrity.read_sealed_json(path)


def found_site(c: Comparison) -> str | None:
    """The culprit the localisation of ``c`` names (``parity.localise.replay``): a quantity,
    ``none`` when every quantity agreed, ``(skipped)``/``(not localised: why)`` otherwise,
    or None without a localisation (a float64-only comparison)."""
    if "localise" not in c.kinds:
        return None
    r = _load(c.result("localise"))
    if r["status"] == "localised":
        return r["culprit"] or "none"
    return f"({r['status']}: {r['reason']})" if r["reason"] else f"({r['status']})"


def site_cell(expected: str | None, found: str | None) -> str:
    """``yes`` when the localisation found the fault's site, ``no`` when it found another
    or none, ``-`` when the fault has no site."""
    if expected is None:
        return "-"
    return yes_no(found == expected)


def _results(c: Comparison) -> tuple[dict, dict | None, dict | None]:
    """(perstep result, diagnosis result or None, split result or None)."""
    diagnosis = split = None
    if c.f64_pair is not None:
        diagnosis, split = _load(c.result("diagnosis")), _load(c.result("split"))
    return _load(c.result("perstep")), diagnosis, split


def step_cell(value) -> str:
    """A first step as the tables write it: the step, or ``never``."""
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


def detection_rows(params: Mapping) -> tuple[list[dict], list[dict]]:
    """(one row per fault comparison, one row per correct pair), from the result files of
    the comparison jobs (relative to the working directory); ``params`` as
    ``plan.Plan.detection_params`` gives them."""
    rows = []
    for item in params["faults"]:
        f, c = item["fault"], Comparison.from_params(item["comparison"])
        perstep, diagnosis, split = _results(c)
        j = apply_criteria(perstep, diagnosis)
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
                "detected": yes_no(bool(j.by)),
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
                "expected_site": f.get("site"),
                "found_site": found_site(c),
                "site_found": site_cell(f.get("site"), found_site(c)),
                "note": note,
            }
        )
    alarms = []
    for c in map(Comparison.from_params, params["correct_pairs"]):
        perstep, diagnosis, split = _results(c)
        j = apply_criteria(perstep, diagnosis)
        flag = {k: (NOT_COMPUTED if v is None else yes_no(v)) for k, v in j.flagged.items()}
        alarms.append(
            {
                "experiment": c.experiment,
                "comparison": c.name,
                "device": c.device,
                "pair": f"{c.reference.label} vs {c.candidate.label}",
                "false_alarm": yes_no(bool(j.by)),
                **flag,
                "worst_dparam": perstep["worst_dparam"],
                "f64_f64": None if split is None else split["worst"]["f64_f64"],
                "fp64_worst_ratio": None if diagnosis is None else diagnosis["fp64_worst_ratio"],
                "f64_headroom": None if diagnosis is None else diagnosis["f64_headroom"],
                "culprit": found_site(c),
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
    fmt.update({c: step_cell for c in ("max_abs_step", "fp64_rule_step", "f64_rounding_step")})
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
        "expected_site",
        "found_site",
        "site_found",
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
            + "\n".join(
                f"- **{r['fault']}** ({r['experiment']}): {md_text(r['note'])}" for r in undetected
            )
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


def detection(
    params: Mapping,
    out_csv: str,
    out_md: str,
    alarms_csv: str,
    alarms_md: str,
    figure_paths: Sequence[str],
    log: logging.Logger,
) -> tuple[list[dict], list[dict]]:
    """The detection table, the false-alarm table (each with its Markdown and HTML twins)
    and the detection figure, from the result files of every fault comparison and every
    correct pair (``params`` from ``plan.Plan.detection_params``). Raises ``OSError``/``KeyError``
    for a missing or malformed result."""
    rows, alarms = detection_rows(params)
    tables.write_csv(out_csv, rows, DETECTION_COLUMNS)
    tables.write_csv(alarms_csv, alarms, FALSE_ALARM_COLUMNS)
    detection_md, alarms_text = detection_markdown(rows, alarms, params["left_out"])
    tables.write_twins(out_md, detection_md)
    tables.write_twins(alarms_md, alarms_text)
    figures.plot_detection(figure_paths, rows, alarms, params["tolerance"])
    for c, k in counts(rows, alarms).items():
        log.info("%s: %s", c, k)
    return rows, alarms
