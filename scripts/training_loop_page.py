"""Snakemake job: the report's training-loop page (see
parity.report.pages.training_loop_page_job)."""

from parity.core.fileio import job_logger
from parity.report import pages as report_pages

sm = snakemake  # noqa: F821
log = job_logger(sm.log[0])
report_pages.training_loop_page_job(sm.input.text, sm.input.defaults, sm.output.html)
log.info("wrote %s", sm.output.html)
