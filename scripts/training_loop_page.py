"""Snakemake job: the report's training-loop page (see
parity.report_pages.training_loop_page_job)."""

from parity import report_pages
from parity.fileio import job_logger

sm = snakemake  # noqa: F821
log = job_logger(sm.log[0])
report_pages.training_loop_page_job(sm.input.text, sm.input.defaults, sm.output.html)
log.info("wrote %s", sm.output.html)
