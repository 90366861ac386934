"""Snakemake job: one optimizer-defaults table from the frameworks' own printouts, and its
sealed record (parity.report.sealed)."""

from parity.core.fileio import job_start

sm = snakemake  # noqa: F821
# First, before the imports below (torch, numpy, pyarrow): the job's CPU priority.
log = job_start(sm)

from parity.render import tables
from parity.report import sealed
from parity.train import optimizer_defaults

made_from = sealed.read_inputs(sm.input)
rows = optimizer_defaults.read(list(sm.input))
tables.write_csv(sm.output.csv, rows, optimizer_defaults.COLUMNS)
tables.write_twins(
    sm.output.md,
    "# Optimizer defaults\n\n" + tables.markdown_table(rows, optimizer_defaults.COLUMNS),
)
sealed.seal_page(
    sm.params.seal, made_from, {"csv": sm.output.csv, "md": sm.output.md, "html": sm.output.html}
)
