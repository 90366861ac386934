"""Snakemake job: localise one comparison, or skip it.

This adapter's body is parity.adapters.localise, run in a fork of an interpreter that has
already imported its libraries where it can (parity.core.warm)."""

from parity.adapters import localise
from parity.core.warm import run_job

run_job(snakemake, localise.main)  # noqa: F821
