"""Snakemake job: the report's training-loop page (see
parity.report.pages.training_loop_page), and its sealed record (parity.report.sealed)."""

from parity.core.fileio import job_start

sm = snakemake  # noqa: F821
# First, before the imports below (torch, numpy, pyarrow): the job's CPU priority.
log = job_start(sm)

from parity.report import sealed
from parity.report.pages import training_loop_page

made_from = sealed.read_inputs(sm.input)
training_loop_page(sm.input.text, sm.input.defaults, sm.output.html)
sealed.seal_page(sm.params.seal, made_from, {"html": sm.output.html})
log.info("wrote %s", sm.output.html)
