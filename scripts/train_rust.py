"""Snakemake job: one run of a Rust runner binary (candle-parity, burn-parity) with the
settings its rule resolved (see parity.train.rust)."""

from parity.core.fileio import job_start

sm = snakemake  # noqa: F821
# First, before the imports below (torch, numpy, pyarrow): the job's CPU priority.
log = job_start(sm)

from parity.plan.keys import RunKey
from parity.train import rust as rust_runner

w = sm.wildcards
key = RunKey(w.experiment, w.run, w.dtype, w.device)
rust_runner.train(
    key,
    sm.params.settings,
    sm.input.fixture,
    sm.input.binary,
    sm.output.trace,
    sm.threads,
    log,
    sm.log[0],
    build=sm.params.build,
)
