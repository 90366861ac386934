"""Snakemake job: a batch of probes (every probe of one dtype and device) with PyTorch.

This adapter's body is parity.adapters.probe_torch, run in a fork of an interpreter that has
already imported its libraries where it can (parity.core.warm)."""

from parity.adapters import probe_torch
from parity.core.warm import run_job

run_job(snakemake, probe_torch.main)  # noqa: F821
