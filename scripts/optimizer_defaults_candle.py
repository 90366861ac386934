"""Snakemake job: candle-nn's optimizer defaults, printed by the candle-parity binary."""

from parity.core.fileio import job_start
from parity.run import defaults

sm = snakemake  # noqa: F821
log = job_start(sm)
defaults.write(sm.output[0], defaults.candle_defaults(sm.input.binary))
