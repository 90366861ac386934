"""Snakemake job: the tables and figures of one comparison (rules compare and perstep).

This adapter's body is parity.adapters.compare, run in a fork of an interpreter that has
already imported its libraries where it can (parity.core.warm)."""

from parity.adapters import compare
from parity.core.warm import run_job

run_job(snakemake, compare.main)  # noqa: F821
