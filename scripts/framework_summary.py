"""Snakemake job: the study's framework table, computed from the runs (see
parity.report.framework.framework_summary)."""

from parity.core.fileio import job_logger
from parity.report.framework import framework_summary

sm = snakemake  # noqa: F821
log = job_logger(sm.log[0])
rows = framework_summary(sm.params.table, sm.output.csv, sm.output.md)
log.info("%d rows", len(rows))
