"""Snakemake job: float64 split table of one comparison (see parity.compare_jobs.split_job)."""

from parity import compare_jobs
from parity.fileio import job_logger

sm = snakemake  # noqa: F821
log = job_logger(sm.log[0])
traces = {k: sm.input[k] for k in ("ref32", "cand32", "ref64", "cand64")}
compare_jobs.split_job(
    sm.params.job,
    traces,
    sm.input.fixture,
    sm.output.csv,
    sm.output.md,
    sm.output.result,
    log,
    code=sm.params.code,
)
