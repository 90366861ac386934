"""Snakemake job: the probe table and its Markdown twin (see
parity.probe.table.probes_table)."""

from parity.core.fileio import job_start

sm = snakemake  # noqa: F821
# First, before the imports below (torch, numpy, pyarrow): the job's CPU priority.
log = job_start(sm)

from parity.probe.plan import ProbePlan
from parity.probe.table import probes_table

probes_table(
    ProbePlan.from_params(sm.params.plan),
    sm.output.csv,
    sm.output.md,
    log,
    sm.output.sources,
    code=sm.params.code,
    remote_hosts=sm.params.remote,
)
