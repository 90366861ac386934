"""Snakemake job: one PyTorch run (see parity.torch_runner)."""

from parity import torch_runner
from parity.experiments import Plan, RunKey
from parity.fileio import job_logger

sm = snakemake  # noqa: F821
log = job_logger(sm.log[0])
w = sm.wildcards
key = RunKey(w.experiment, w.run, w.dtype, w.device)
torch_runner.train(Plan(sm.config), key, sm.input.fixture, sm.output.trace, sm.threads, log)
