"""Snakemake job: the tables and figures of one comparison (rules compare and perstep).

The body is parity.jobs.compare, run in a fork of an interpreter that has already
imported its libraries where it can (parity.core.warm)."""

from parity.core.warm import run_job
from parity.jobs import compare

run_job(snakemake, compare.main)  # noqa: F821
