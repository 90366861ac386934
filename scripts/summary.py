"""Snakemake job: the summary of every comparison (see parity.report.summary.summary)."""

from parity.core.fileio import job_start
from parity.report.summary import summary

sm = snakemake  # noqa: F821
log = job_start(sm)
rows = summary(
    list(sm.input),
    sm.params.unsupported,
    sm.output.csv,
    sm.output.md,
    sm.output.sources,
    code=sm.params.code,
)
log.info("%d rows", len(rows))
