"""Snakemake job: localise one comparison, or skip it (see parity.localise.job)."""

from parity.core.fileio import job_start

sm = snakemake  # noqa: F821
# First, before the imports below (torch, numpy, pyarrow): the job's CPU priority.
log = job_start(sm)

from parity.localise.job import localise

localise(
    sm.params.job,
    sm.input.perstep,
    sm.input.get("diagnosis"),
    {k: sm.output[k] for k in ("md", "result")},
    log,
    sm.log[0],
    code=sm.params.code,
)
