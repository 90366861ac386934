"""Snakemake job (rules compare and perstep): the tables and figures of one comparison, in
one process: always the per-step table; with float64 runs (rule compare) the float64 split
and the diagnosis too (see parity.compare.job.compare)."""

from parity.compare.job import compare
from parity.core.fileio import job_start

sm = snakemake  # noqa: F821
log = job_start(sm)
traces = {k: sm.input[k] for k in sm.input.keys() if k != "fixture"}  # noqa: SIM118
outputs = {k: sm.output[k] for k in sm.output.keys()}  # noqa: SIM118
compare(sm.params.job, traces, sm.input.fixture, outputs, log, code=sm.params.code)
