"""Snakemake job: one experiment's cross-host table (see parity.remote.crosshost.crosshost_job)."""

from parity.core.fileio import job_logger
from parity.remote import crosshost

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
