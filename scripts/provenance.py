"""Snakemake job: the provenance of every trace (see parity.report.pages.provenance)."""

from parity.core.fileio import job_logger
from parity.report.pages import provenance

sm = snakemake  # noqa: F821
log = job_logger(sm.log[0])
rows = provenance(list(sm.input), sm.output.csv, sm.output.md)
log.info("%d traces", len(rows))
