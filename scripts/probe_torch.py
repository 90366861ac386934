"""Snakemake job: a batch of probes (every probe of one dtype and device) with PyTorch.

The body is parity.jobs.probe_torch, run in a fork of an interpreter that has already
imported its libraries where it can (parity.core.warm)."""

from parity.core.warm import run_job
from parity.jobs import probe_torch

run_job(snakemake, probe_torch.main)  # noqa: F821
