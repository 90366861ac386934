"""Snakemake job: the learning-rate sensitivity search (see parity.detection.sensitivity)."""

from parity.core.fileio import job_start
from parity.detection.sensitivity import sensitivity

sm = snakemake  # noqa: F821
log = job_start(sm)
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
