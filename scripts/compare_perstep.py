"""Snakemake job: per-step table and figure of one comparison (see
parity.compare_jobs.perstep_job)."""

from parity import compare_jobs
from parity.fileio import job_logger

sm = snakemake  # noqa: F821
log = job_logger(sm.log[0])
compare_jobs.perstep_job(
    sm.params.job,
    sm.input.reference,
    sm.input.candidate,
    sm.input.fixture,
    sm.output.csv,
    sm.output.md,
    sm.output.result,
    log,
    code=sm.params.code,
    figure=[sm.output.png, sm.output.svg],
)
