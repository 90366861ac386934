"""Snakemake job: PyTorch's optimizer defaults, read from torch itself.

This adapter's body is parity.adapters.optimizer_defaults_torch, run in a fork of an
interpreter that has already imported its libraries where it can (parity.core.warm)."""

from parity.adapters import optimizer_defaults_torch
from parity.core.warm import run_job

run_job(snakemake, optimizer_defaults_torch.main)  # noqa: F821
