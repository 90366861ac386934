"""Snakemake job: draw one table as PNG and SVG (see parity.figures)."""

import pandas as pd

from parity import figures, integrity
from parity.fileio import job_logger

sm = snakemake  # noqa: F821
log = job_logger(sm.log[0])
# The table must be the one its comparison job wrote (its sealed result records its sha256).
found = integrity.read_sealed_json(sm.input.result)
integrity.check_file(sm.input.csv, found["tables"]["csv"]["sha256"], sm.input.result)
frame = pd.read_csv(sm.input.csv)
rows = [{k: (None if pd.isna(v) else v) for k, v in r.items()} for r in frame.to_dict("records")]
perstep = integrity.read_sealed_json(sm.input.perstep)
scale = perstep["param_scale"]
markers = {}
if sm.wildcards.kind == "perstep":
    columns = {"max_dparam": "max|ref32 − cand32|", "dloss": "|dloss|"}
elif sm.wildcards.kind == "split":
    columns = {
        "max_dparam": "max|ref32 − cand32|",
        "torch_f64": "max|ref32 − ref64|",
        "candle_f64": "max|cand32 − cand64|",
        "f64_f64": "max|ref64 − cand64|",
    }
else:
    columns = {
        "max_dparam": "max|ref32 − cand32|",
        "f64_f64": "max|ref64 − cand64|",
        "f64_threshold": "float64 rounding threshold",
        "rmse": "RMSE(ref32 − cand32)",
    }
    markers = {
        "f32 exceeds tolerance": perstep["tol_exceeded_step"],
        "f64 leaves rounding": found["f64_divergence_step"],
        f"ReLU flip {found['relu_flip_unit']}": found["relu_flip_step"],
    }
figures.plot_columns(
    [sm.output.png, sm.output.svg],
    rows,
    columns,
    sm.params.title,
    sm.params.tolerance,
    markers=markers,
    rounding_level=figures.ulp32(scale) if scale else None,
)
log.info("wrote %s and %s", sm.output.png, sm.output.svg)
