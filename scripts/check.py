"""Snakemake job: fail when any verdict differs from its expectation."""

import sys

from parity import jobs
from parity.fileio import job_logger

sm = snakemake  # noqa: F821
log = job_logger(sm.log[0])
bad = jobs.check_job(sm.input[0], log)
if bad:
    sys.exit(f"{len(bad)} comparison(s) differ from their expectation; see {sm.log[0]}")
