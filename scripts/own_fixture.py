"""Snakemake job: an own model's fixture, from the PyTorch model's own initialisation
(see parity.own.fixture)."""

from parity.core.fileio import job_start

sm = snakemake  # noqa: F821
# First, before the imports below (torch, numpy, pyarrow): the job's CPU priority.
log = job_start(sm)

from parity.own import fixture

tensors = fixture.write(sm.output[0], sm.params.settings)
log.info("wrote %s: %s", sm.output[0], {k: list(v.shape) for k, v in tensors.items()})
