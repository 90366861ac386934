"""Snakemake job: the study's framework table, computed from the runs (see
parity.report.framework.framework_summary), and its sealed record (parity.report.sealed)."""

from parity.core.fileio import job_start

sm = snakemake  # noqa: F821
# First, before the imports below (torch, numpy, pyarrow): the job's CPU priority.
log = job_start(sm)

from parity.report import sealed
from parity.report.framework import framework_summary

made_from = sealed.read_inputs(sm.input)
rows = framework_summary(sm.params.table, sm.output.csv, sm.output.md)
sealed.seal_page(
    sm.params.seal, made_from, {"csv": sm.output.csv, "md": sm.output.md, "html": sm.output.html}
)
log.info("%d rows", len(rows))
