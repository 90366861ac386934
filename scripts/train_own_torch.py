"""Snakemake job: one PyTorch run of an own model (the user's nn.Module).

This adapter's body is parity.adapters.train_own_torch, run in a fork of an interpreter that
has already imported its libraries where it can (parity.core.warm)."""

from parity.adapters import train_own_torch
from parity.core.warm import run_job

run_job(snakemake, train_own_torch.main)  # noqa: F821
