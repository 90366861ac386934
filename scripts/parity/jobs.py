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
from .probe_results import judge, read_results
from .probes import ProbePlan
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


def summary_job(results: Sequence[str], out_csv: str, out_md: str) -> list[dict]:
    """Gather per-comparison results into ``summary.csv`` and its Markdown twin."""
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
    if bad:
        head += f"**{len(bad)} comparison(s) differ from their expectation.**\n\n"
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


def probes_table_job(plan: ProbePlan, out_csv: str, out_md: str, log: logging.Logger) -> list[dict]:
    """The probe table: one row per (probe, case, quantity, framework, device, dtype).

    Reads every result of ``plan`` (``results/probes/…``), judges it against the probe's
    exact values or PyTorch on the CPU (``probe_results.judge``), and lists unsupported
    cells with their reason. Raises ``probe_results.ProbeResultError`` for a result file
    that is stale or malformed; nothing is written then.
    """
    results = {}
    for key in plan.jobs():
        _, results[key] = read_results(key.result, plan.probe(key.probe), key)
    rows = []
    for key in plan.cells():
        probe = plan.probe(key.probe)
        reason = plan.unsupported(key)
        for case, q in probe.quantities():
            row = {
                "probe": key.probe,
                "case": case,
                "quantity": q,
                "framework": key.framework,
                "device": key.device,
                "dtype": key.dtype,
                "values": None,
                "reference": "",
                "reference_values": None,
                "max_diff": None,
                "tolerance": None,
            }
            if reason is not None:
                rows.append({**row, "verdict": verdicts.UNSUPPORTED, "note": reason})
                continue
            outcome = results[key][(case, q)]
            ref_run = results.get(key.reference, {}).get((case, q))
            j = judge(probe, key, outcome, None if key.is_reference else ref_run)
            note = j.note
            if j.verdict == verdicts.KNOWN_BUG_FIXED:
                note = "; ".join(filter(None, ["update the probe file's known_bug", note]))
            rows.append(
                {
                    **row,
                    "values": None if outcome.values is None else outcome.values.tolist(),
                    "reference": j.reference,
                    "reference_values": (
                        None if j.reference_values is None else j.reference_values.tolist()
                    ),
                    "max_diff": j.max_diff,
                    "tolerance": j.tolerance,
                    "verdict": j.verdict,
                    "note": note,
                }
            )
    csv_rows = [
        {
            **r,
            "values": tables.values_text(r["values"]),
            "reference_values": tables.values_text(r["reference_values"]),
        }
        for r in rows
    ]
    tables.write_csv(out_csv, csv_rows, tables.PROBE_COLUMNS)
    descriptions = {name: p.spec["description"] for name, p in plan.probes.items()}
    notes = {
        name: [f"{c['name']}: {c['note']}" for c in p.cases if c["note"]]
        for name, p in plan.probes.items()
    }
    write_text_atomic(out_md, tables.probes_markdown(rows, descriptions, notes))
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["verdict"]] = counts.get(r["verdict"], 0) + 1
    log.info("%d probe rows: %s", len(rows), counts)
    return rows
