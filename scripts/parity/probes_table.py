"""The probe table job: every probe result judged against its reference."""

from __future__ import annotations

import logging

from . import tables, verdicts
from .probe_plan import ProbePlan
from .probe_results import judge_probe_row, read_results


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
