"""Snakemake job: the detection and false-alarm tables and figure (see parity.detection.table)."""

from parity.core.fileio import job_start
from parity.detection.table import detection

sm = snakemake  # noqa: F821
log = job_start(sm)
detection(
    sm.params.detection,
    sm.output.csv,
    sm.output.md,
    sm.output.alarms_csv,
    sm.output.alarms_md,
    [sm.output.png, sm.output.svg],
    log,
)
