"""Snakemake job: one experiment's cross-host table (see parity.crosshost.crosshost_job)."""

from parity import crosshost
from parity.fileio import job_logger

sm = snakemake  # noqa: F821
log = job_logger(sm.log[0])
crosshost.crosshost_job(
    sm.params.job,
    sm.input.manifest,
    sm.output.csv,
    sm.output.md,
    log,
    sm.output.result,
    code=sm.params.code,
)
