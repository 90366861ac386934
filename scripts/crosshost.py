"""Snakemake job: one experiment's cross-host table (see parity.remote.crosshost.crosshost)."""

from parity.core.fileio import job_logger
from parity.remote.crosshost import crosshost

sm = snakemake  # noqa: F821
log = job_logger(sm.log[0])
crosshost(
    sm.params.job,
    sm.input.manifest,
    sm.output.csv,
    sm.output.md,
    log,
    sm.output.result,
    code=sm.params.code,
)
