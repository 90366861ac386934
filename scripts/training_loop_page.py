"""Snakemake job: the report's training-loop page (see parity.jobs.training_loop_page_job)."""

from parity import jobs
from parity.fileio import job_logger

sm = snakemake  # noqa: F821
log = job_logger(sm.log[0])
jobs.training_loop_page_job(sm.input.text, sm.input.defaults, sm.output.html)
log.info("wrote %s", sm.output.html)
