"""Snakemake job: one experiment's cross-host table (see parity.remote.crosshost.crosshost)."""

from parity.core.fileio import job_start
from parity.remote.crosshost import crosshost

sm = snakemake  # noqa: F821
log = job_start(sm)
crosshost(
    sm.params.job,
    sm.input.manifest,
    sm.output.csv,
    sm.output.md,
    log,
    sm.output.result,
    code=sm.params.code,
)
