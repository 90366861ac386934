"""Snakemake job: one PyTorch run with the settings its rule resolved (see
parity.run.torch)."""

from parity.core.fileio import job_start
from parity.plan.keys import RunKey
from parity.run import torch as torch_runner

sm = snakemake  # noqa: F821
log = job_start(sm)
w = sm.wildcards
key = RunKey(w.experiment, w.run, w.dtype, w.device)
torch_runner.train(key, sm.params.settings, sm.input.fixture, sm.output.trace, sm.threads, log)
