"""Snakemake job: PyTorch's optimizer defaults, read from torch itself."""

from parity.core.fileio import job_start
from parity.run import defaults

sm = snakemake  # noqa: F821
log = job_start(sm)
defaults.write(sm.output[0], defaults.torch_defaults())
