"""Snakemake job: one layout-fuzzing campaign, config block ``fuzz``: findings table,
summary, one probe file and one reproduction per finding (see parity.fuzz.job.fuzz)."""

from parity.core.fileio import job_start

sm = snakemake  # noqa: F821
# First, before the imports below (torch, numpy, pyarrow): the job's CPU priority.
log = job_start(sm)

from parity.fuzz.job import OUTPUTS, fuzz
from parity.plan import limits

outputs = {k: sm.output[k] for k in OUTPUTS}
fuzz(
    sm.params.fuzz,
    sm.input.binaries,
    sm.input.known,
    outputs,
    sm.threads,
    log,
    sm.log[0],
    seal=sm.params.seal,
    # what each runner's build record must hold: its release's build of this checkout
    builds=sm.params.builds,
    # the known-bug probes read within the config's limits, as the probe plan reads them
    limits=limits.settings(sm.config),
)
