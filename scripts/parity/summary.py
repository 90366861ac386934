"""The jobs over all comparisons: the summary (and the partial one written when a run
fails), the check that gates on it, and the study's framework table.

Plain functions of what the rules resolved and of paths; ``scripts/summary.py``,
``scripts/check.py`` and ``scripts/framework_summary.py`` are thin adapters.
"""

from __future__ import annotations

import csv
import json
import logging
import os
from collections.abc import Mapping, Sequence

from . import tables, verdicts
from .keys import Comparison

#: Diagnosis results copied into summary.csv.
DIAGNOSIS_SUMMARY = (
    "fp64_rule_verdict",
    "tol_exceeded_step",
    "tol_exceeded_where",
    "f64_divergence_step",
    "f64_divergence_where",
    "relu_flip_step",
    "relu_flip_unit",
    "relu_flip_counts",
    "signed_agreement_until",
    "worst_ulp",
    "fp64_worst_ratio",
)

SUMMARY_COLUMNS = (
    "experiment",
    "comparison",
    "device",
    "pair",
    "step0_identical",
    "bitwise_identical",
    "status",
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
    *DIAGNOSIS_SUMMARY,
    "reference_host",
    "candidate_host",
    "reference_version",
    "candidate_version",
)


def summary_job(
    results: Sequence[str],
    unsupported: Sequence[Mapping],
    out_csv: str,
    out_md: str,
    errors: Sequence[dict] = (),
) -> list[dict]:
    """Gather per-comparison results into ``summary.csv`` and its Markdown twin.

    ``results`` are the comparison jobs' JSON results; ``unsupported`` the cells the
    validity matrix excludes (``experiment``, ``device``, ``label``, ``reason``), each a row
    with verdict ``unsupported``; ``errors`` (from :func:`partial_summary_job`) are rows with
    verdict ``error``.
    """
    by_kind: dict[str, dict] = {"perstep": {}, "split": {}, "diagnosis": {}}
    for path in results:
        with open(path, encoding="utf-8") as f:
            r = json.load(f)
        by_kind[r["kind"]][(r["experiment"], r["comparison"], r["device"])] = r
    rows = []
    for key, r in sorted(by_kind["perstep"].items()):
        s = by_kind["split"].get(key, {}).get("worst", {})
        d = by_kind["diagnosis"].get(key, {})
        rows.append(
            {
                "experiment": r["experiment"],
                "comparison": r["comparison"],
                "device": r["device"],
                "pair": f"{r['reference']} vs {r['candidate']}",
                "step0_identical": r["step0_identical"],
                "bitwise_identical": r["bitwise_identical"],
                "status": r["status"],
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
                **{c: d.get(c) for c in DIAGNOSIS_SUMMARY},
                # computed once, by the per-step job
                "tol_exceeded_step": r["tol_exceeded_step"],
                "tol_exceeded_where": r["tol_exceeded_where"],
                "reference_host": r["reference_provenance"]["host"],
                "candidate_host": r["candidate_provenance"]["host"],
                "reference_version": r["reference_provenance"]["framework_version"],
                "candidate_version": r["candidate_provenance"]["framework_version"],
            }
        )
    for e in errors:
        rows.append({**dict.fromkeys(SUMMARY_COLUMNS), **e, "verdict": verdicts.ERROR})
    for cell in unsupported:
        rows.append(
            {
                **dict.fromkeys(SUMMARY_COLUMNS),
                "experiment": cell["experiment"],
                "comparison": "-",
                "device": cell["device"],
                "pair": f"{cell['label']}: {cell['reason']}",
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
        "status",
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
    tables.write_twins(out_md, head + tables.markdown_table(rows, md_cols, fmt))
    return rows


def partial_summary_job(
    comparisons: Sequence[Comparison], unsupported: Sequence[Mapping], out_csv: str, out_md: str
) -> int:
    """Summary of a run that failed part-way: every comparison whose per-step result
    exists is summarised; each one missing becomes an ``error`` row naming the log of the
    first job in its chain that did not deliver (a training run whose trace is missing,
    else the comparison job). Returns the number of error rows; writes nothing when no
    result is missing (the normal summary job is then authoritative)."""
    results, errors = [], []
    for c in comparisons:
        kinds = c.kinds
        have = [k for k in kinds if os.path.exists(c.result(k))]
        results += [c.result(k) for k in have]
        if "perstep" in have:
            continue
        keys = [c.reference, c.candidate, *(c.f64_pair or ())]
        missing = next((k for k in keys if not os.path.exists(k.trace)), None)
        log = missing.log if missing else c.log("perstep")
        errors.append(
            {
                "experiment": c.experiment,
                "comparison": c.name,
                "device": c.device,
                "pair": f"{c.reference.label} vs {c.candidate.label}",
                "status": f"no result: see {log}"
                + (f" (run {missing.label} failed)" if missing else ""),
                "tolerance": c.tolerance,
                "expected_verdict": verdicts.EXPECTATIONS[c.expect],
            }
        )
    if errors:
        summary_job(results, unsupported, out_csv, out_md, errors)
    return len(errors)


def check_job(summary_csv: str, log: logging.Logger, probes_csv: str | None = None) -> list[dict]:
    """Rows of ``summary.csv`` (and ``probes.csv``) whose verdict does not meet its
    expectation, each logged with what it means."""
    with open(summary_csv, encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    bad = [r for r in rows if not verdicts.meets_expectation(r["verdict"])]
    for r in bad:
        msg = f"{r['experiment']} {r['comparison']} {r['device']}: {r['verdict']}"
        if r["verdict"] == verdicts.UNEXPECTED_PASS:
            msg += " -- a negative control passed: the harness can no longer see this fault"
        if r["verdict"] == verdicts.ERROR:
            msg += f" ({r['status']})"
        log.error(msg)
    log.info("%d comparisons, %d differ from their expectation", len(rows), len(bad))
    if probes_csv is not None:
        with open(probes_csv, encoding="utf-8") as f:
            probe_rows = list(csv.DictReader(f))
        probe_bad = [r for r in probe_rows if not verdicts.meets_expectation(r["verdict"])]
        for r in probe_bad:
            msg = (
                f"probe {r['probe']} {r['case']} {r['quantity']} {r['framework']} "
                f"{r['device']} {r['dtype']}: {r['verdict']}"
            )
            if r["verdict"] == verdicts.KNOWN_BUG_FIXED:
                msg += " -- the recorded known bug is gone: update the probe file"
            log.error(msg)
        log.info("%d probe rows, %d differ from their expectation", len(probe_rows), len(probe_bad))
        bad += probe_bad
    return bad


FRAMEWORK_SUMMARY_COLUMNS = (
    "quantity",
    "experiment",
    "steps",
    "candle_vs_pytorch",
    "burn_vs_pytorch",
)


def framework_summary_job(items: Sequence[Mapping], out_csv: str, out_md: str) -> list[dict]:
    """The study's framework table, computed from the runs: per configured experiment, the
    f32 max|dparam| after the last step and the f64-vs-f64 distance after the last step,
    for each framework against PyTorch on the CPU, read from the result files ``items``
    name (``plan.Plan.framework_summary_params``). A framework without runs says ``not run``; no
    number is ever typed in."""
    rows = []
    for item in items:
        e, steps = item["experiment"], item["steps"]
        f32 = {"quantity": f"{item['label']} {steps} steps, f32 max|dparam|"}
        f64 = {"quantity": f"{item['label']} {steps} steps, f64 vs f64"}
        for fw, found in item["results"].items():
            col = f"{fw}_vs_pytorch"
            if found is None:
                f32[col] = f64[col] = "not run"
                continue
            with open(found["perstep"], encoding="utf-8") as f:
                f32[col] = json.load(f)["final_dparam"]
            if found["split"] is None:
                f64[col] = "no f64 runs"
            else:
                with open(found["split"], encoding="utf-8") as f:
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
    tables.write_twins(
        out_md,
        "# Framework summary\n\n"
        + tables.markdown_table(rows, ("quantity", "burn_vs_pytorch", "candle_vs_pytorch"), fmt),
    )
    return rows
