"""What each analysis job of the workflow does, as plain functions of paths.

``scripts/*.py`` are thin adapters from Snakemake's ``snakemake`` object to these
functions; tests call them directly.
"""

from __future__ import annotations

import csv
import json
import logging
import math
from collections.abc import Mapping, Sequence

from . import compare, tables, verdicts
from .experiments import Comparison, Plan, RunKey
from .fileio import sha256_file, write_text_atomic
from .schema import TraceReader


def open_trace(plan: Plan, key: RunKey, path: str | None = None) -> TraceReader:
    """Open the trace of ``key`` and check it against what the config says it must be."""
    return TraceReader(path or key.trace, expect=plan.trace_expectation(key))


def _provenance(r: TraceReader) -> dict:
    m = r.meta
    return {
        "framework_version": m["framework_version"],
        "host": m["host"],
        "device": m["device"],
        "status": m["status"],
        "diverged_step": m["diverged_step"],
        "cpu": m["runner"].get("cpu"),
        "threads": m["runner"].get("threads"),
    }


def _json_number(v):
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else v


def perstep_job(
    plan: Plan,
    comp: Comparison,
    reference: str,
    candidate: str,
    fixture: str,
    out_csv: str,
    out_md: str,
    out_result: str,
    log: logging.Logger,
) -> dict:
    """Per-step table of a comparison, its Markdown twin and its result for the summary.

    Raises ``schema.TraceError`` or ``compare.ComparisonError`` for traces that cannot be
    trusted or compared; nothing is written then.
    """
    ref = open_trace(plan, comp.reference, reference)
    cand = open_trace(plan, comp.candidate, candidate)
    compare.check_comparable([ref, cand], sha256_file(fixture))
    result = compare.perstep(ref, cand)
    rows = result.rows
    worst, worst_step = compare.worst(rows, "max_dparam")
    worst_where = next((r["where"] for r in rows if r["step"] == worst_step), "")
    dloss, _ = compare.worst(rows, "dloss")
    verdict = verdicts.judge(worst, comp.tolerance, comp.expect)
    notes = [
        f"reference: {comp.reference.label} (`{reference}`)",
        f"candidate: {comp.candidate.label} (`{candidate}`)",
        "step 0 identical bit for bit: " + ("yes" if result.step0_identical else "**no**"),
        (
            f"worst max|dparam| {tables.sci(worst)} at step {worst_step} (`{worst_where}`); "
            f"tolerance {comp.tolerance:g}; verdict **{verdict}**"
        ),
    ]
    for side, r in (("reference", ref), ("candidate", cand)):
        if r.diverged_step is not None:
            notes.append(f"{side} diverged at step {r.diverged_step} (NaN or Inf)")
    tables.write_csv(out_csv, rows, tables.PERSTEP_COLUMNS)
    write_text_atomic(
        out_md,
        tables.perstep_markdown(rows, f"{comp.experiment}: {comp.name} on {comp.device}", notes),
    )
    summary = {
        "experiment": comp.experiment,
        "comparison": comp.name,
        "device": comp.device,
        "reference": comp.reference.label,
        "candidate": comp.candidate.label,
        "step0_identical": result.step0_identical,
        "worst_dparam": _json_number(worst),
        "worst_step": worst_step,
        "worst_where": worst_where,
        "final_dparam": _json_number(rows[-1]["max_dparam"]),
        "worst_dloss": _json_number(dloss),
        "tolerance": comp.tolerance,
        "expect": comp.expect,
        "verdict": verdict,
        "reference_provenance": _provenance(ref),
        "candidate_provenance": _provenance(cand),
    }
    write_text_atomic(out_result, json.dumps(summary, indent=1, sort_keys=True))
    log.info("%s %s: worst %s -> %s", comp.experiment, comp.tag, worst, verdict)
    return summary


def split_job(
    plan: Plan,
    comp: Comparison,
    traces: Mapping[str, str],
    fixture: str,
    out_csv: str,
    out_md: str,
    out_result: str,
    log: logging.Logger,
) -> dict:
    """Float64 split table of a comparison (see ``compare.split``).

    ``traces`` has ``ref32``, ``cand32``, ``ref64``, ``cand64`` paths. Raises like
    :func:`perstep_job`.
    """
    ref64, cand64 = comp.f64_pair
    keys = {"ref32": comp.reference, "cand32": comp.candidate, "ref64": ref64, "cand64": cand64}
    readers = {k: open_trace(plan, keys[k], traces[k]) for k in keys}
    compare.check_comparable(list(readers.values()), sha256_file(fixture))
    rows = compare.split(readers["ref32"], readers["cand32"], readers["ref64"], readers["cand64"])
    worst = {c: compare.worst(rows, c)[0] for c in tables.SPLIT_COLUMNS[1:]}
    notes = [f"{k}: {keys[k].label}" for k in keys]
    notes.append(
        "columns: max|ref32 − cand32|, max|ref32 − ref64|, max|cand32 − cand64|, "
        "max|ref64 − cand64|"
    )
    tables.write_csv(out_csv, rows, tables.SPLIT_COLUMNS)
    write_text_atomic(
        out_md,
        tables.split_markdown(
            rows,
            f"{comp.experiment}: {comp.name} on {comp.device}, float64 split",
            comp.reference.run,
            comp.candidate.run,
            notes,
        ),
    )
    summary = {
        "experiment": comp.experiment,
        "comparison": comp.name,
        "device": comp.device,
        "worst": {k: _json_number(v) for k, v in worst.items()},
        "final": {k: _json_number(rows[-1][k]) for k in tables.SPLIT_COLUMNS[1:]},
    }
    write_text_atomic(out_result, json.dumps(summary, indent=1, sort_keys=True))
    log.info("%s %s split: %s", comp.experiment, comp.tag, worst)
    return summary


SUMMARY_COLUMNS = (
    "experiment",
    "comparison",
    "device",
    "pair",
    "step0_identical",
    "worst_dparam",
    "worst_step",
    "worst_where",
    "final_dparam",
    "worst_dloss",
    "torch_f64",
    "candle_f64",
    "f64_f64",
    "tolerance",
    "verdict",
    "expected_verdict",
    "reference_host",
    "candidate_host",
    "reference_version",
    "candidate_version",
)


def summary_job(plan: Plan, results: Sequence[str], out_csv: str, out_md: str) -> list[dict]:
    """Gather per-comparison results into ``summary.csv`` and its Markdown twin.

    Cells the validity matrix excludes get a row with verdict ``unsupported``.
    """
    perstep, split = {}, {}
    for path in results:
        with open(path, encoding="utf-8") as f:
            r = json.load(f)
        key = (r["experiment"], r["comparison"], r["device"])
        (split if "worst" in r else perstep)[key] = r
    rows = []
    for key, r in sorted(perstep.items()):
        s = split.get(key, {}).get("worst", {})
        rows.append(
            {
                "experiment": r["experiment"],
                "comparison": r["comparison"],
                "device": r["device"],
                "pair": f"{r['reference']} vs {r['candidate']}",
                "step0_identical": r["step0_identical"],
                "worst_dparam": r["worst_dparam"],
                "worst_step": r["worst_step"],
                "worst_where": r["worst_where"],
                "final_dparam": r["final_dparam"],
                "worst_dloss": r["worst_dloss"],
                "torch_f64": s.get("torch_f64"),
                "candle_f64": s.get("candle_f64"),
                "f64_f64": s.get("f64_f64"),
                "tolerance": r["tolerance"],
                "verdict": r["verdict"],
                "expected_verdict": verdicts.EXPECTATIONS[r["expect"]],
                "reference_host": r["reference_provenance"]["host"],
                "candidate_host": r["candidate_provenance"]["host"],
                "reference_version": r["reference_provenance"]["framework_version"],
                "candidate_version": r["candidate_provenance"]["framework_version"],
            }
        )
    for key, reason in plan.unsupported_cells():
        rows.append(
            {
                **dict.fromkeys(SUMMARY_COLUMNS),
                "experiment": key.experiment,
                "comparison": "-",
                "device": key.device,
                "pair": f"{key.label}: {reason}",
                "verdict": verdicts.UNSUPPORTED,
                "expected_verdict": verdicts.UNSUPPORTED,
            }
        )
    tables.write_csv(out_csv, rows, SUMMARY_COLUMNS)
    fmt = {
        c: tables.sci
        for c in (
            "worst_dparam",
            "final_dparam",
            "worst_dloss",
            "torch_f64",
            "candle_f64",
            "f64_f64",
        )
    }
    md_cols = (
        "experiment",
        "comparison",
        "device",
        "pair",
        "step0_identical",
        "worst_dparam",
        "worst_where",
        "f64_f64",
        "tolerance",
        "verdict",
        "expected_verdict",
    )
    bad = [r for r in rows if not verdicts.meets_expectation(r["verdict"])]
    head = "# Summary\n\n"
    for r in bad:
        head += f"- **{r['experiment']} {r['comparison']} {r['device']}: {r['verdict']}**"
        if r["verdict"] == verdicts.UNEXPECTED_PASS:
            head += " (a negative control passed: the harness no longer sees this fault)"
        head += "\n"
    if bad:
        head += "\n"
    write_text_atomic(out_md, head + tables.markdown_table(rows, md_cols, fmt))
    return rows


def check_job(summary_csv: str, log: logging.Logger) -> list[dict]:
    """Rows of ``summary.csv`` whose verdict does not meet its expectation (logged)."""
    with open(summary_csv, encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    bad = [r for r in rows if not verdicts.meets_expectation(r["verdict"])]
    for r in bad:
        msg = f"{r['experiment']} {r['comparison']} {r['device']}: {r['verdict']}"
        if r["verdict"] == verdicts.UNEXPECTED_PASS:
            msg += " -- a negative control passed: the harness can no longer see this fault"
        log.error(msg)
    log.info("%d comparisons, %d differ from their expectation", len(rows), len(bad))
    return bad


FRAMEWORK_SUMMARY_COLUMNS = (
    "quantity",
    "experiment",
    "steps",
    "candle_vs_pytorch",
    "burn_vs_pytorch",
)


def framework_summary_job(plan: Plan, out_csv: str, out_md: str) -> list[dict]:
    """The study's framework table, computed from the runs: per configured experiment, the
    f32 max|dparam| after the last step and the f64-vs-f64 distance after the last step,
    for each framework against PyTorch on the CPU. A framework without runs says
    ``not run``; no number is ever typed in."""
    rows = []
    for item in plan.framework_summary_rows():
        e = item["experiment"]
        steps = plan.experiments[e]["steps"]
        f32 = {"quantity": f"{item['label']} {steps} steps, f32 max|dparam|"}
        f64 = {"quantity": f"{item['label']} {steps} steps, f64 vs f64"}
        for fw, comp in item["comparisons"].items():
            col = f"{fw}_vs_pytorch"
            if comp is None:
                f32[col] = f64[col] = "not run"
                continue
            with open(comp.result("perstep"), encoding="utf-8") as f:
                f32[col] = json.load(f)["final_dparam"]
            if comp.f64_pair is None:
                f64[col] = "no f64 runs"
            else:
                with open(comp.result("split"), encoding="utf-8") as f:
                    f64[col] = json.load(f)["final"]["f64_f64"]
        for r in (f32, f64):
            r.update(experiment=e, steps=steps)
            for col in FRAMEWORK_SUMMARY_COLUMNS[3:]:
                r.setdefault(col, "not run")  # a framework this workflow does not run yet
            rows.append(r)
    tables.write_csv(out_csv, rows, FRAMEWORK_SUMMARY_COLUMNS)
    fmt = {
        c: (lambda v: v if isinstance(v, str) else tables.sci(v))
        for c in ("candle_vs_pytorch", "burn_vs_pytorch")
    }
    write_text_atomic(
        out_md,
        "# Framework summary\n\n"
        + tables.markdown_table(rows, ("quantity", "burn_vs_pytorch", "candle_vs_pytorch"), fmt),
    )
    return rows
