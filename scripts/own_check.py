"""Snakemake job: check an own model's Rust port against the PyTorch model before any of
its training jobs (see parity.train.own_check)."""

from parity.core.fileio import job_start

sm = snakemake  # noqa: F821
# First, before the imports below (torch, numpy, pyarrow): the job's CPU priority.
log = job_start(sm)

from parity.plan.keys import RunKey
from parity.train.own_check import own_check

w = sm.wildcards
key = RunKey(w.experiment, w.framework, "f32", w.device)
own_check(
    key,
    sm.params.settings,
    sm.input.fixture,
    sm.input.binary,
    sm.output[0],
    log,
    sm.log[0],
    build=sm.params.build,
)
