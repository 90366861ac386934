"""Snakemake job: one layout-fuzzing campaign, config block ``fuzz``: findings table,
summary, one probe file and one reproduction per finding (see parity.fuzz.job.fuzz)."""

from parity.core.fileio import job_start
from parity.fuzz.job import OUTPUTS, fuzz

sm = snakemake  # noqa: F821
log = job_start(sm)
outputs = {k: sm.output[k] for k in OUTPUTS}
fuzz(sm.params.fuzz, sm.input.binaries, sm.input.known, outputs, sm.threads, log, sm.log[0])
