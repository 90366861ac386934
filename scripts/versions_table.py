"""Snakemake job: the release matrix, which releases of candle and burn have each known
fault (see parity.report.matrix.versions_job)."""

from parity.core.fileio import job_logger
from parity.report import matrix as version_matrix

sm = snakemake  # noqa: F821
log = job_logger(sm.log[0])
version_matrix.versions_job(
    sm.params.matrix,
    sm.input.summary,
    getattr(sm.input, "probes", None),
    sm.output.csv,
    sm.output.md,
    log,
)
