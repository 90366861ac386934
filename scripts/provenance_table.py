"""Snakemake job: the provenance of every trace (see parity.jobs.provenance_job)."""

from parity import jobs
from parity.experiments import Plan
from parity.fileio import job_logger

sm = snakemake  # noqa: F821
log = job_logger(sm.log[0])
rows = jobs.provenance_job(Plan(sm.config), list(sm.input), sm.output.csv, sm.output.md)
log.info("%d traces", len(rows))
