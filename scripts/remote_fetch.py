"""Snakemake job: one remote host's run and transfer (see parity.remote.fetch.fetch_job)."""

from pathlib import Path

from parity.core.fileio import job_logger
from parity.remote import fetch as remote

sm = snakemake  # noqa: F821
log = job_logger(sm.log[0])
basedir = str(Path(sm.scriptdir).parent)  # the workflow folder: this checkout
remote.fetch_job(sm.params.job, sm.output.manifest, log, basedir)
