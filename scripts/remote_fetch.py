"""Snakemake job: one remote host's run and transfer (see parity.remote.fetch.remote_fetch)."""

from pathlib import Path

from parity.core.fileio import job_start
from parity.remote.fetch import remote_fetch

sm = snakemake  # noqa: F821
log = job_start(sm)
basedir = str(Path(sm.scriptdir).parent)  # the workflow folder: this checkout
remote_fetch(sm.params.job, sm.output.manifest, log, basedir)
