"""Snakemake job: gather every comparison into summary.csv (see parity.jobs.summary_job)."""

from parity import jobs
from parity.fileio import job_logger

sm = snakemake  # noqa: F821
log = job_logger(sm.log[0])
rows = jobs.summary_job(list(sm.input), sm.output.csv, sm.output.md)
log.info("%d comparisons", len(rows))
