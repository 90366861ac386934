"""Snakemake job: the probe table and its Markdown twin (see
parity.probes_table.probes_table_job)."""

from parity import probes_table
from parity.fileio import job_logger
from parity.probe_plan import ProbePlan

sm = snakemake  # noqa: F821
log = job_logger(sm.log[0])
probes_table.probes_table_job(
    ProbePlan.from_params(sm.params.plan),
    sm.output.csv,
    sm.output.md,
    log,
    sm.output.sources,
    code=sm.params.code,
    remote_hosts=sm.params.remote,
)
