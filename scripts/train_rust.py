"""Snakemake job: one run of a Rust runner binary, e.g. candle-parity (see parity.rust_runner)."""

from parity import rust_runner
from parity.experiments import Plan, RunKey
from parity.fileio import job_logger

sm = snakemake  # noqa: F821
log = job_logger(sm.log[0])
w = sm.wildcards
key = RunKey(w.experiment, w.run, w.dtype, w.device)
rust_runner.train(
    Plan(sm.config),
    key,
    sm.input.fixture,
    sm.input.binary,
    sm.output.trace,
    sm.threads,
    log,
    sm.log[0],
)
