"""Snakemake job: per-step table of one comparison (see parity.jobs.perstep_job)."""

from parity import jobs
from parity.experiments import Plan
from parity.fileio import job_logger

sm = snakemake  # noqa: F821
log = job_logger(sm.log[0])
plan = Plan(sm.config)
comp = plan.comparison(sm.wildcards.experiment, sm.wildcards.tag)
jobs.perstep_job(
    plan,
    comp,
    sm.input.reference,
    sm.input.candidate,
    sm.input.fixture,
    sm.output.csv,
    sm.output.md,
    sm.output.result,
    log,
)
