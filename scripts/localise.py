"""Snakemake job: localise one comparison, or skip it (see parity.localise.job)."""

from parity.core.fileio import job_start
from parity.localise.job import localise

sm = snakemake  # noqa: F821
log = job_start(sm)
localise(
    sm.params.job,
    sm.input.perstep,
    sm.input.get("diagnosis"),
    {k: sm.output[k] for k in ("md", "result")},
    log,
    sm.log[0],
    code=sm.params.code,
)
