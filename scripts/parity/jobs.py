"""What each analysis job of the workflow does, as plain functions of paths.

``scripts/*.py`` are thin adapters from Snakemake's ``snakemake`` object to these
functions; tests call them directly.
"""

from __future__ import annotations

import csv
import json
import logging
import math
import os
from collections.abc import Mapping, Sequence

from . import closeness, compare, tables, verdicts
from .experiments import Comparison, Plan, RunKey
from .fileio import sha256_file, write_text_atomic
from .probe_results import judge_probe_row, read_results
from .probes import ProbePlan
from .schema import TraceReader


def open_trace(plan: Plan, key: RunKey, path: str | None = None) -> TraceReader:
    """Open the trace of ``key`` and check it against what the config says it must be."""
    return TraceReader(path or key.trace, expect=plan.trace_expectation(key))


def open_split(
    plan: Plan, comp: Comparison, traces: Mapping[str, str], fixture: str
) -> tuple[dict[str, RunKey], dict[str, TraceReader]]:
    """The four traces of a float64 split (``ref32``, ``cand32``, ``ref64``, ``cand64`` →
    path), each checked against the config, all against each other and the fixture.
    Returns (run keys, readers), both keyed like ``traces``."""
    ref64, cand64 = comp.f64_pair
    keys = {"ref32": comp.reference, "cand32": comp.candidate, "ref64": ref64, "cand64": cand64}
    readers = {k: open_trace(plan, keys[k], traces[k]) for k in keys}
    compare.check_comparable(list(readers.values()), sha256_file(fixture))
    return keys, readers


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


def _status(*readers: TraceReader) -> str:
    """``ok``, or which runs diverged (NaN or Inf) and from which step."""
    bad = [
        f"{r.meta['run']} {r.meta['dtype']} diverged at step {r.diverged_step}"
        for r in readers
        if r.diverged_step is not None
    ]
    return "; ".join(bad) or "ok"


def _json_number(v):
    """``v`` for a JSON result; JSON has neither NaN nor Infinity, so a non-finite value (a
    difference is ``inf`` where a run diverged, see ``closeness``) is stored as null."""
    return None if v is None or (isinstance(v, float) and not math.isfinite(v)) else v


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
    if comp.tolerance == 0:
        # A tolerance of 0 demands bit-for-bit identity (also -0.0 vs 0.0, and the losses).
        verdict = verdicts.check_verdict(result.bitwise_identical, comp.expect)
    else:
        verdict = verdicts.tolerance_verdict(worst, comp.tolerance, comp.expect)
    status = _status(ref, cand)
    notes = [
        f"reference: {comp.reference.label} (`{reference}`)",
        f"candidate: {comp.candidate.label} (`{candidate}`)",
        "step 0 identical bit for bit: " + ("yes" if result.step0_identical else "**no**"),
        "every step identical bit for bit: " + ("yes" if result.bitwise_identical else "no"),
        f"status: {status}",
        (
            f"worst max|dparam| {tables.sci(worst)} at step {worst_step} (`{worst_where}`); "
            f"tolerance {comp.tolerance:g}; verdict **{verdict}**"
        ),
    ]
    tables.write_csv(out_csv, rows, tables.PERSTEP_COLUMNS)
    tables.write_twins(
        out_md,
        tables.perstep_markdown(rows, f"{comp.experiment}: {comp.name} on {comp.device}", notes),
    )
    summary = {
        "kind": "perstep",
        "experiment": comp.experiment,
        "comparison": comp.name,
        "device": comp.device,
        "reference": comp.reference.label,
        "candidate": comp.candidate.label,
        "step0_identical": result.step0_identical,
        "bitwise_identical": result.bitwise_identical,
        "status": status,
        "param_scale": result.param_scale,
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
    keys, readers = open_split(plan, comp, traces, fixture)
    rows = compare.split(readers["ref32"], readers["cand32"], readers["ref64"], readers["cand64"])
    worst = {c: compare.worst(rows, c)[0] for c in tables.SPLIT_COLUMNS[1:]}
    notes = [f"{k}: {keys[k].label}" for k in keys]
    notes.append(
        "columns: max|ref32 − cand32|, max|ref32 − ref64|, max|cand32 − cand64|, "
        "max|ref64 − cand64|"
    )
    tables.write_csv(out_csv, rows, tables.SPLIT_COLUMNS)
    tables.write_twins(
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
        "kind": "split",
        "experiment": comp.experiment,
        "comparison": comp.name,
        "device": comp.device,
        "worst": {k: _json_number(v) for k, v in worst.items()},
        "final": {k: _json_number(rows[-1][k]) for k in tables.SPLIT_COLUMNS[1:]},
    }
    write_text_atomic(out_result, json.dumps(summary, indent=1, sort_keys=True))
    log.info("%s %s split: %s", comp.experiment, comp.tag, worst)
    return summary


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

DIAGNOSIS_COLUMNS = (
    "step",
    "max_dparam",
    "max_ulp",
    "ulp_at_max",
    "rmse",
    "f64_f64",
    "f64_threshold",
    "ref_err",
    "ref_err_where",
    "cand_err",
    "cand_err_where",
    "same_error",
    "error_corr",
    "error_max_diff",
    "fp64_rule",
    "fp64_ratio",
    "relu_flips_f32",
    "relu_unit_f32",
    "relu_flips_f64",
    "relu_unit_f64",
)


def _first(rows, test):
    return next((r for r in rows if r["step"] > 0 and test(r)), None)


def diagnosis_job(
    plan: Plan,
    comp: Comparison,
    traces: Mapping[str, str],
    fixture: str,
    out_csv: str,
    out_md: str,
    out_result: str,
    log: logging.Logger,
) -> dict:
    """Why a pair differs, per step and localised (see README, "Diagnosis").

    Per step: max|dparam|, max ULP distance and RMSE of the float32 pair; f64-vs-f64 with
    the float64-rounding threshold (``compare.f64_rounding_threshold``); the signed errors
    of each float32 run against its own float64 run (``compare.error_agreement``); the
    fp64-referenced rule (``compare.fp64_rule``); and, for ReLU models, how many hidden
    units have different active-sample counts between the two runs in the forward pass
    of that step (parameters of the previous recorded step, that step's batch), for the
    float32 and the float64 pair.

    Localised: the first step where the f32 difference exceeds the tolerance, where f64
    leaves float64 rounding, the first ReLU flip, and how long the signed errors agree.
    """
    from safetensors.numpy import load_file

    from . import activations

    _, opened = open_split(plan, comp, traces, fixture)
    readers = list(opened.values())
    settings = plan.run_settings(comp.experiment, comp.reference.run)
    model = settings["model"]
    diag = plan.diagnosis
    x = load_file(fixture)["x"]
    relu = model.get("activation") == "relu"
    names = readers[0].layout.names
    rows, prev = [], None
    for recs in compare.aligned(readers):
        r32, c32, r64, c64 = (rec.tensors for rec in recs)
        step = recs[0].step
        d32 = compare.max_abs_diff(r32, c32, names)
        d64 = compare.max_abs_diff(r64, c64, names)
        drift = max(
            compare.max_abs_diff(r32, r64, names).value, compare.max_abs_diff(c32, c64, names).value
        )
        agree = compare.error_agreement(r32, r64, c32, c64, names)
        rule = compare.fp64_rule(
            r32, c32, r64, names, diag["fp64_rule"]["multiplier"], diag["fp64_rule"]["atol"]
        )
        row = {
            "step": step,
            "max_dparam": d32.value,
            "max_ulp": compare.max_ulp(r32, c32, names),
            "ulp_at_max": compare.ulp_at(r32, c32, d32),
            "rmse": compare.rmse(r32, c32, names),
            "f64_f64": d64.value,
            "f64_where": d64.where,
            "f64_threshold": compare.f64_rounding_threshold(drift, diag["f64_rounding_factor"]),
            "where": d32.where,
            "ref_err": agree.ref.value,
            "ref_err_where": agree.ref.where,
            "cand_err": agree.cand.value,
            "cand_err_where": agree.cand.where,
            "same_error": agree.same,
            "error_corr": agree.corr,
            "error_max_diff": agree.max_diff,
            "fp64_rule": rule.passed,
            "fp64_ratio": rule.ratio,
            "relu_flips_f32": None,
            "relu_unit_f32": "",
            "relu_flips_f64": None,
            "relu_unit_f64": "",
            "relu_counts_f32": None,
            "relu_counts_f64": None,
        }
        if relu and prev is not None:
            batch = x[(step - 1) % x.shape[0]]
            for kind, (a, b) in (("f32", (prev[0], prev[1])), ("f64", (prev[2], prev[3]))):
                n, unit, ca, cb = activations.first_difference(
                    activations.active_counts(model, a, batch),
                    activations.active_counts(model, b, batch),
                )
                row[f"relu_flips_{kind}"] = n
                row[f"relu_unit_{kind}"] = unit
                row[f"relu_counts_{kind}"] = None if ca is None else f"{ca} vs {cb}"
        rows.append(row)
        prev = (r32, c32, r64, c64)

    tol = _first(rows, lambda r: not closeness.within(r["max_dparam"], comp.tolerance))
    # An infinite f64 difference (a float64 run diverged) is never explained by rounding.
    f64 = _first(rows, lambda r: not closeness.within(r["f64_f64"], r["f64_threshold"]))
    flip = _first(rows, lambda r: (r["relu_flips_f32"] or 0) > 0)
    flip64 = _first(rows, lambda r: (r["relu_flips_f64"] or 0) > 0)
    rule_fail = _first(rows, lambda r: not r["fp64_rule"])
    agree_until = 0
    for r in rows[1:]:
        if not r["same_error"]:
            break
        agree_until = r["step"]
    result = {
        "kind": "diagnosis",
        "experiment": comp.experiment,
        "comparison": comp.name,
        "device": comp.device,
        "tol_exceeded_step": tol and tol["step"],
        "tol_exceeded_where": tol and tol["where"],
        "f64_divergence_step": f64 and f64["step"],
        "f64_divergence_where": f64 and f64["f64_where"],
        "f64_divergence_value": f64 and f64["f64_f64"],
        "f64_divergence_threshold": f64 and f64["f64_threshold"],
        "relu_flip_step": flip and flip["step"],
        "relu_flip_unit": flip and flip["relu_unit_f32"],
        "relu_flip_counts": flip and flip["relu_counts_f32"],
        "relu_flip64_step": flip64 and flip64["step"],
        "relu_flip64_unit": flip64 and flip64["relu_unit_f64"],
        "relu_flip64_counts": flip64 and flip64["relu_counts_f64"],
        "signed_agreement_until": agree_until,
        "fp64_rule_first_fail": rule_fail and rule_fail["step"],
        "fp64_rule_verdict": verdicts.check_verdict(rule_fail is None, comp.expect),
        "fp64_worst_ratio": max((r["fp64_ratio"] for r in rows[1:]), default=0.0),
        "worst_ulp": max((r["max_ulp"] for r in rows), default=0.0),
        "f64_rounding_factor": diag["f64_rounding_factor"],
    }
    tables.write_csv(out_csv, rows, DIAGNOSIS_COLUMNS)
    tables.write_twins(out_md, tables.diagnosis_markdown(rows, result, comp))
    write_text_atomic(out_result, json.dumps(result, indent=1, sort_keys=True))
    log.info("%s %s diagnosis: %s", comp.experiment, comp.tag, result)
    return result


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
    plan: Plan,
    results: Sequence[str],
    out_csv: str,
    out_md: str,
    errors: Sequence[dict] = (),
) -> list[dict]:
    """Gather per-comparison results into ``summary.csv`` and its Markdown twin.

    Cells the validity matrix excludes get a row with verdict ``unsupported``; ``errors``
    (from :func:`partial_summary_job`) are rows with verdict ``error``.
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
                "reference_host": r["reference_provenance"]["host"],
                "candidate_host": r["candidate_provenance"]["host"],
                "reference_version": r["reference_provenance"]["framework_version"],
                "candidate_version": r["candidate_provenance"]["framework_version"],
            }
        )
    for e in errors:
        rows.append({**dict.fromkeys(SUMMARY_COLUMNS), **e, "verdict": verdicts.ERROR})
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


def partial_summary_job(plan: Plan, out_csv: str, out_md: str) -> int:
    """Summary of a run that failed part-way: every comparison whose per-step result
    exists is summarised; each one missing becomes an ``error`` row naming the log of the
    first job in its chain that did not deliver (a training run whose trace is missing,
    else the comparison job). Returns the number of error rows; writes nothing when no
    result is missing (the normal summary job is then authoritative)."""
    results, errors = [], []
    for c in plan.comparisons():
        kinds = ["perstep"] + (["split", "diagnosis"] if c.f64_pair else [])
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
        summary_job(plan, results, out_csv, out_md, errors)
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
    tables.write_twins(
        out_md,
        "# Framework summary\n\n"
        + tables.markdown_table(rows, ("quantity", "burn_vs_pytorch", "candle_vs_pytorch"), fmt),
    )
    return rows


def probes_table_job(plan: ProbePlan, out_csv: str, out_md: str, log: logging.Logger) -> list[dict]:
    """The probe table: one row per (probe, case, quantity, framework, device, dtype).

    Reads every result of ``plan`` (``results/probes/…``), judges it against the probe's
    exact values or PyTorch on the CPU (``probe_results.judge_probe_row``), and lists
    unsupported cells with their reason. Raises ``probe_results.ProbeResultError`` for a result file
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
            j = judge_probe_row(probe, key, outcome, None if key.is_reference else ref_run)
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
    tables.write_twins(out_md, tables.probes_markdown(rows, descriptions, notes))
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["verdict"]] = counts.get(r["verdict"], 0) + 1
    log.info("%d probe rows: %s", len(rows), counts)
    return rows


PROVENANCE_COLUMNS = (
    "experiment",
    "run",
    "dtype",
    "device",
    "framework",
    "framework_version",
    "compiler",
    "python",
    "host",
    "cpu",
    "platform",
    "threads",
    "device_detail",
    "features",
    "optimizer_impl",
    "optimizer_path",
    "status",
    "fixture_sha256",
    "config_hash",
    "schema_version",
    "trace",
)


def provenance_job(plan: Plan, traces: Sequence[str], out_csv: str, out_md: str) -> list[dict]:
    """Where and how every trace was made, read from the traces themselves (so traces
    imported from another host show that host)."""
    rows = []
    for path in traces:
        m = TraceReader(path).meta
        runner = m["runner"]
        rows.append(
            {
                **{k: m[k] for k in ("experiment", "run", "dtype", "device", "framework")},
                "framework_version": m["framework_version"],
                "compiler": runner.get("compiler", ""),
                "python": runner.get("python", ""),
                "host": m["host"],
                "cpu": runner.get("cpu", ""),
                "platform": runner.get("platform", ""),
                "threads": runner.get("threads", ""),
                "device_detail": runner.get("device_detail", ""),
                "features": runner.get("features", ""),
                "optimizer_impl": runner.get("optimizer_impl", ""),
                "optimizer_path": runner.get("optimizer_path", ""),
                "status": m["status"],
                "fixture_sha256": m["fixture_sha256"],
                "config_hash": m["config_hash"],
                "schema_version": m["schema_version"],
                "trace": path,
            }
        )
    tables.write_csv(out_csv, rows, PROVENANCE_COLUMNS)
    short = [{**r, "fixture_sha256": r["fixture_sha256"][:12]} for r in rows]
    md_cols = (
        "experiment",
        "run",
        "dtype",
        "device",
        "framework_version",
        "compiler",
        "python",
        "host",
        "cpu",
        "threads",
        "optimizer_impl",
        "optimizer_path",
        "status",
        "fixture_sha256",
    )
    tables.write_twins(
        out_md,
        "# Provenance of every trace\n\n"
        f"- fixtures (sha256): {len({r['fixture_sha256'] for r in rows})} distinct\n"
        f"- hosts: {', '.join(sorted({r['host'] for r in rows}))}\n\n"
        + tables.markdown_table(short, md_cols),
    )
    return rows


def training_loop_page_job(rst_path: str, defaults_csv: str, out_html: str) -> None:
    """The report's training-loop page: our text (``report/training_loop.rst``) followed by
    the optimizer defaults both frameworks printed, rendered to HTML with docutils."""
    from docutils.core import publish_string

    with open(rst_path, encoding="utf-8") as f:
        text = f.read()
    with open(defaults_csv, encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    cols = ("framework", "version", "optimizer", "lr", "betas", "eps", "weight_decay", "momentum")

    def cell(v: str) -> str:
        return f"``{v}``" if v else "—"

    lines = [".. list-table::", "   :header-rows: 1", ""]
    lines.append("   * - " + "\n     - ".join(cols))
    for r in rows:
        lines.append("   * - " + "\n     - ".join(cell(r[c]) for c in cols))
    page = publish_string(
        text + "\n".join(lines) + "\n",
        writer_name="html5",
        settings_overrides={"report_level": 2, "halt_level": 2, "output_encoding": "unicode"},
    )
    write_text_atomic(out_html, page)
