"""Snakemake job: the summary of every comparison (see parity.report.summary.summary)."""

from parity.core.fileio import job_start

sm = snakemake  # noqa: F821
# First, before the imports below (torch, numpy, pyarrow): the job's CPU priority.
log = job_start(sm)

from parity.report.summary import summary

rows = summary(
    list(sm.input),
    sm.params.unsupported,
    sm.output.csv,
    sm.output.md,
    sm.output.sources,
    code=sm.params.code,
)
log.info("%d rows", len(rows))
