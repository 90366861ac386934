"""Snakemake job: the learning-rate sensitivity search (see parity.detection.sensitivity)."""

from parity.core.fileio import job_start

sm = snakemake  # noqa: F821
# First, before the imports below (torch, numpy, pyarrow): the job's CPU priority.
log = job_start(sm)

from parity.detection.sensitivity import sensitivity

sensitivity(
    sm.params.settings,
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
