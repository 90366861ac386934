"""Snakemake job: check an own model's Rust port against the PyTorch model before any of
its training jobs (see parity.run.own_check)."""

from parity.core.fileio import job_start
from parity.plan.keys import RunKey
from parity.run.own_check import own_check

sm = snakemake  # noqa: F821
log = job_start(sm)
w = sm.wildcards
key = RunKey(w.experiment, w.framework, "f32", w.device)
own_check(key, sm.params.settings, sm.input.fixture, sm.input.binary, sm.output[0], log, sm.log[0])
