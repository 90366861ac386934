"""The study's framework table, computed from the runs: per configured experiment, each
framework's float32 max|dparam| and float64-vs-float64 distance after the last step
against PyTorch on the CPU, read from the comparison results (no number is typed in).
``scripts/framework_summary.py`` is a thin adapter.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from parity.core import integrity
from parity.render import tables

FRAMEWORK_SUMMARY_COLUMNS = (
    "quantity",
    "experiment",
    "steps",
    "candle_vs_pytorch",
    "burn_vs_pytorch",
)


def framework_summary(items: Sequence[Mapping], out_csv: str, out_md: str) -> list[dict]:
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
            f32[col] = integrity.read_sealed_json(found["perstep"])["final_dparam"]
            if found["split"] is None:
                f64[col] = "no f64 runs"
            else:
                f64[col] = integrity.read_sealed_json(found["split"])["final"]["f64_f64"]
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
