"""Snakemake job: diagnosis of one comparison (see parity.jobs.diagnosis_job)."""

from parity import jobs
from parity.experiments import Plan
from parity.fileio import job_logger

sm = snakemake  # noqa: F821
log = job_logger(sm.log[0])
plan = Plan(sm.config)
comp = plan.comparison(sm.wildcards.experiment, sm.wildcards.tag)
traces = {k: sm.input[k] for k in ("ref32", "cand32", "ref64", "cand64")}
jobs.diagnosis_job(
    plan, comp, traces, sm.input.fixture, sm.output.csv, sm.output.md, sm.output.result, log
)
