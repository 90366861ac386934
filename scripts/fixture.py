"""Snakemake job: draw one experiment's fixture (see parity.trace.fixtures)."""

from parity.core.fileio import job_start

# First, before the imports below (torch, numpy, pyarrow): the job's CPU priority.
log = job_start(snakemake)  # noqa: F821

from parity.trace import fixtures

tensors = fixtures.write(snakemake.output[0], snakemake.params.settings)  # noqa: F821
log.info("wrote %s: %s", snakemake.output[0], {k: list(v.shape) for k, v in tensors.items()})  # noqa: F821
