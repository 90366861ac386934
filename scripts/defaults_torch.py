"""Snakemake job: PyTorch's optimizer defaults, read from torch itself."""

from parity import defaults
from parity.fileio import job_logger

sm = snakemake  # noqa: F821
log = job_logger(sm.log[0])
defaults.write(sm.output[0], defaults.torch_defaults())
