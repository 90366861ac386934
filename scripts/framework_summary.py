"""Snakemake job: the study's framework table, computed from the runs."""

from parity import jobs
from parity.experiments import Plan
from parity.fileio import job_logger

sm = snakemake  # noqa: F821
log = job_logger(sm.log[0])
rows = jobs.framework_summary_job(Plan(sm.config), sm.output.csv, sm.output.md)
log.info("%d rows", len(rows))
