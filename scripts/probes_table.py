"""Snakemake job: the probe table and its Markdown twin (see
parity.probe.table.probes_table)."""

from parity.core.fileio import job_start
from parity.probe.plan import ProbePlan
from parity.probe.table import probes_table

sm = snakemake  # noqa: F821
log = job_start(sm)
probes_table(
    ProbePlan.from_params(sm.params.plan),
    sm.output.csv,
    sm.output.md,
    log,
    sm.output.sources,
    code=sm.params.code,
    remote_hosts=sm.params.remote,
)
