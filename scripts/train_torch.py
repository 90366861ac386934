"""Snakemake job: one PyTorch run with the settings its rule resolved.

The body is parity.jobs.train_torch, run in a fork of an interpreter that has already
imported its libraries where it can (parity.core.warm)."""

from parity.core.warm import run_job
from parity.jobs import train_torch

run_job(snakemake, train_torch.main)  # noqa: F821
