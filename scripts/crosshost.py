"""Snakemake job: one experiment's cross-host table (see parity.remote.crosshost.crosshost)."""

from parity.core.fileio import job_start

sm = snakemake  # noqa: F821
# First, before the imports below (torch, numpy, pyarrow): the job's CPU priority.
log = job_start(sm)

from parity.remote.crosshost import crosshost

crosshost(
    sm.params.job,
    sm.input.manifest,
    sm.output.csv,
    sm.output.md,
    log,
    sm.output.result,
    code=sm.params.code,
)
