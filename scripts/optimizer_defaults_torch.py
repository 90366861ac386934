"""Snakemake job: PyTorch's optimizer defaults, read from torch itself."""

from parity.core.fileio import job_logger
from parity.run import defaults

sm = snakemake  # noqa: F821
log = job_logger(sm.log[0])
defaults.write(sm.output[0], defaults.torch_defaults())
