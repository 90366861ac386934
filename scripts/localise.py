"""Snakemake job: localise one comparison (see parity.replay.localise_job)."""

from parity import replay
from parity.fileio import job_logger

sm = snakemake  # noqa: F821
log = job_logger(sm.log[0])
replay.localise_job(
    sm.params.job,
    sm.input.perstep,
    sm.input.get("diagnosis"),
    {k: sm.output[k] for k in ("csv", "md", "result", "png", "svg")},
    log,
    sm.log[0],
    code=sm.params.code,
)
