"""Snakemake job: burn's optimizer defaults, printed by the burn-parity binary."""

from parity.core.fileio import job_start
from parity.run import defaults

sm = snakemake  # noqa: F821
log = job_start(sm)
defaults.write(sm.output[0], defaults.burn_defaults(sm.input.binary))
