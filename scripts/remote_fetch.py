"""Snakemake job: one remote host's run and transfer (see parity.remote.fetch.remote_fetch)."""

from pathlib import Path

from parity.core.fileio import job_start

sm = snakemake  # noqa: F821
# First, before the imports below (torch, numpy, pyarrow): the job's CPU priority.
log = job_start(sm)

from parity.remote.fetch import remote_fetch

basedir = str(Path(sm.scriptdir).parent)  # the workflow folder: this checkout
remote_fetch(sm.params.job, sm.output.manifest, log, basedir)
