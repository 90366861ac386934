"""Snakemake job: PyTorch's optimizer defaults, read from torch itself.

The body is parity.jobs.optimizer_defaults_torch, run in a fork of an interpreter that has already
imported its libraries where it can (parity.core.warm)."""

from parity.core.warm import run_job
from parity.jobs import optimizer_defaults_torch

run_job(snakemake, optimizer_defaults_torch.main)  # noqa: F821
