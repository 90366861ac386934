"""Snakemake job: candle-nn's optimizer defaults, printed by the candle-parity binary."""

from parity import defaults
from parity.fileio import job_logger

sm = snakemake  # noqa: F821
log = job_logger(sm.log[0])
defaults.write(sm.output[0], defaults.candle_defaults(sm.input.binary))
