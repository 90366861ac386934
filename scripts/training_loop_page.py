"""Snakemake job: the report's training-loop page (see
parity.report.pages.training_loop_page)."""

from parity.core.fileio import job_logger
from parity.report.pages import training_loop_page

sm = snakemake  # noqa: F821
log = job_logger(sm.log[0])
training_loop_page(sm.input.text, sm.input.defaults, sm.output.html)
log.info("wrote %s", sm.output.html)
