"""Snakemake job: localise one comparison, or skip it.

The body is parity.jobs.localise, run in a fork of an interpreter that has already
imported its libraries where it can (parity.core.warm)."""

from parity.core.warm import run_job
from parity.jobs import localise

run_job(snakemake, localise.main)  # noqa: F821
