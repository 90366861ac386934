"""Snakemake job: the learning-rate sensitivity search (see parity.detection)."""

from parity import detection
from parity.experiments import Plan
from parity.fileio import job_logger

sm = snakemake  # noqa: F821
log = job_logger(sm.log[0])
detection.sensitivity_job(
    Plan(sm.config),
    sm.input.reference,
    sm.input.fixture,
    sm.input.get("binary"),
    sm.output.csv,
    sm.output.md,
    [sm.output.png, sm.output.svg],
    sm.threads,
    log,
    sm.log[0],
)
