"""Snakemake job: the release matrix, which releases of candle and burn have each known
fault (see parity.report.matrix.versions_table)."""

from parity.core.fileio import job_logger
from parity.report.matrix import versions_table

sm = snakemake  # noqa: F821
log = job_logger(sm.log[0])
versions_table(
    sm.params.matrix,
    sm.input.summary,
    getattr(sm.input, "probes", None),
    sm.output.csv,
    sm.output.md,
    log,
)
