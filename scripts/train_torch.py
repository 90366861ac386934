"""Snakemake job: one PyTorch run with the settings its rule resolved.

This adapter's body is parity.adapters.train_torch, run in a fork of an interpreter that has
already imported its libraries where it can (parity.core.warm)."""

from parity.adapters import train_torch
from parity.core.warm import run_job

run_job(snakemake, train_torch.main)  # noqa: F821
