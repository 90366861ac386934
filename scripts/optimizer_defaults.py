"""Snakemake job: one optimizer-defaults table from the frameworks' own printouts."""

from parity.core.fileio import job_logger
from parity.render import tables
from parity.run import defaults

sm = snakemake  # noqa: F821
log = job_logger(sm.log[0])
rows = defaults.read(list(sm.input))
tables.write_csv(sm.output.csv, rows, defaults.COLUMNS)
tables.write_twins(
    sm.output.md, "# Optimizer defaults\n\n" + tables.markdown_table(rows, defaults.COLUMNS)
)
