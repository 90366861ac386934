"""Snakemake job: draw one table (see parity.figures)."""

import csv

from parity import figures
from parity.fileio import job_logger

sm = snakemake  # noqa: F821
log = job_logger(sm.log[0])
with open(sm.input.csv, encoding="utf-8") as f:
    raw = list(csv.DictReader(f))
rows = [
    {
        k: (int(v) if k == "step" else (float(v) if v not in ("",) else None))
        for k, v in r.items()
        if k != "where"
    }
    for r in raw
]
if sm.wildcards.kind == "perstep":
    columns = {"max_dparam": "max|dparam|", "dloss": "|dloss|"}
else:
    columns = {
        "max_dparam": "max|ref32 − cand32|",
        "torch_f64": "max|ref32 − ref64|",
        "candle_f64": "max|cand32 − cand64|",
        "f64_f64": "max|ref64 − cand64|",
    }
figures.plot_columns(sm.output.png, rows, columns, sm.params.title, sm.params.tolerance)
log.info("wrote %s", sm.output.png)
