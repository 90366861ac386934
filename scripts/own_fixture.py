"""Snakemake job: an own model's fixture, from the PyTorch model's own initialisation
(see parity.own.fixture)."""

from parity.core.fileio import job_start

sm = snakemake  # noqa: F821
# First, before the imports below (torch, numpy, pyarrow): the job's CPU priority.
log = job_start(sm)

from parity.core import usercode
from parity.own import fixture

settings = sm.params.settings
# the user's code stopped after limits.user_code_idle_seconds without progress, its stack
# in the log (parity.core.usercode)
with usercode.watching(sm.wildcards.experiment, settings["model"]["torch"]):
    tensors = fixture.write(sm.output[0], settings)
log.info("wrote %s: %s", sm.output[0], {k: list(v.shape) for k, v in tensors.items()})
