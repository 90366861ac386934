"""Snakemake job: PyTorch's optimizer defaults, read from torch itself."""

from parity.core.fileio import job_start

sm = snakemake  # noqa: F821
# First, before the imports below (torch, numpy, pyarrow): the job's CPU priority.
log = job_start(sm)

from parity.run import defaults

defaults.write(sm.output[0], defaults.torch_defaults())
