"""Snakemake job: burn's optimizer defaults, printed by the burn-parity binary."""

from parity.core.fileio import job_start

sm = snakemake  # noqa: F821
# First, before the imports below (torch, numpy, pyarrow): the job's CPU priority.
log = job_start(sm)

from parity.train import optimizer_defaults

optimizer_defaults.write(
    sm.output[0], optimizer_defaults.burn_defaults(sm.input.binary, sm.params.build)
)
