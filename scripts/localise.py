"""Snakemake job: localise one comparison, or skip it (see parity.localise_job)."""

from parity import localise_job
from parity.fileio import job_logger

sm = snakemake  # noqa: F821
log = job_logger(sm.log[0])
localise_job.localise_job(
    sm.params.job,
    sm.input.perstep,
    sm.input.get("diagnosis"),
    {k: sm.output[k] for k in ("csv", "md", "result", "png", "svg")},
    log,
    sm.log[0],
    code=sm.params.code,
)
