"""Snakemake job: one PyTorch run with the settings its rule resolved (see
parity.torch_runner)."""

from parity import torch_runner
from parity.fileio import job_logger
from parity.keys import RunKey

sm = snakemake  # noqa: F821
log = job_logger(sm.log[0])
w = sm.wildcards
key = RunKey(w.experiment, w.run, w.dtype, w.device)
torch_runner.train(key, sm.params.settings, sm.input.fixture, sm.output.trace, sm.threads, log)
