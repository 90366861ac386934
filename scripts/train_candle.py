"""Snakemake job: one candle run through the candle-parity binary (see parity.candle_runner)."""

from parity import candle_runner
from parity.experiments import Plan, RunKey
from parity.fileio import job_logger

sm = snakemake  # noqa: F821
log = job_logger(sm.log[0])
w = sm.wildcards
key = RunKey(w.experiment, w.run, w.dtype, w.device)
candle_runner.train(
    Plan(sm.config),
    key,
    sm.input.fixture,
    sm.input.binary,
    sm.output.trace,
    sm.threads,
    log,
    sm.log[0],
)
