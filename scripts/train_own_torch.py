"""Snakemake job: one PyTorch run of an own model (the user's nn.Module).

The body is parity.jobs.train_own_torch, run in a fork of an interpreter that has already
imported its libraries where it can (parity.core.warm)."""

from parity.core.warm import run_job
from parity.jobs import train_own_torch

run_job(snakemake, train_own_torch.main)  # noqa: F821
