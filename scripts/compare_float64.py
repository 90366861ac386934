"""Snakemake job: the float64 split and the diagnosis of one comparison, tables and figures
(see parity.compare_jobs.float64_job)."""

from parity import compare_jobs
from parity.fileio import job_logger

sm = snakemake  # noqa: F821
log = job_logger(sm.log[0])
compare_jobs.float64_job(
    sm.params.job,
    {k: sm.input[k] for k in compare_jobs.SPLIT_ROLES},
    sm.input.fixture,
    sm.input.perstep,
    {
        kind: {out: sm.output[f"{kind}_{out}"] for out in compare_jobs.FLOAT64_OUTPUTS}
        for kind in ("split", "diagnosis")
    },
    log,
    code=sm.params.code,
)
