"""Snakemake job: one PyTorch run with the settings its rule resolved (see
parity.run.torch)."""

from parity.core.fileio import job_start

sm = snakemake  # noqa: F821
# First, before the imports below (torch, numpy, pyarrow): the job's CPU priority.
log = job_start(sm)

from parity.plan.keys import RunKey
from parity.run import torch as torch_runner

w = sm.wildcards
key = RunKey(w.experiment, w.run, w.dtype, w.device)
torch_runner.train(key, sm.params.settings, sm.input.fixture, sm.output.trace, sm.threads, log)
