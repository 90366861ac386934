"""Snakemake job: one optimizer-defaults table from the frameworks' own printouts."""

import json

from parity import defaults, tables
from parity.fileio import job_logger

sm = snakemake  # noqa: F821
log = job_logger(sm.log[0])
parts = []
for path in sm.input:
    with open(path, encoding="utf-8") as f:
        parts.append(json.load(f))
rows = defaults.merge(parts)
tables.write_csv(sm.output.csv, rows, defaults.COLUMNS)
tables.write_twins(
    sm.output.md, "# Optimizer defaults\n\n" + tables.markdown_table(rows, defaults.COLUMNS)
)
