"""Snakemake job: the provenance of every trace (see parity.report.pages.provenance_job)."""

from parity.core.fileio import job_logger
from parity.report import pages as report_pages

sm = snakemake  # noqa: F821
log = job_logger(sm.log[0])
rows = report_pages.provenance_job(list(sm.input), sm.output.csv, sm.output.md)
log.info("%d traces", len(rows))
