"""Snakemake job: the detection and false-alarm tables and figure (see parity.detection.table)."""

from parity.core.fileio import job_start

sm = snakemake  # noqa: F821
# First, before the imports below (torch, numpy, pyarrow): the job's CPU priority.
log = job_start(sm)

from parity.detection.table import detection

detection(
    sm.params.detection,
    sm.output.csv,
    sm.output.md,
    sm.output.alarms_csv,
    sm.output.alarms_md,
    [sm.output.png, sm.output.svg],
    log,
)
