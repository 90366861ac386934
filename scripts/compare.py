"""Snakemake job (rules compare and perstep): the tables and figures of one comparison, in
one process. Always the per-step table (parity.compare.job.perstep_job); with float64 runs
(rule compare) the float64 split and the diagnosis too (parity.compare.job.float64_job),
which read the per-step result just written."""

from parity.compare import job as compare_jobs
from parity.core.fileio import job_logger

sm = snakemake  # noqa: F821
log = job_logger(sm.log[0])
compare_jobs.perstep_job(
    sm.params.job,
    sm.input.ref32,
    sm.input.cand32,
    sm.input.fixture,
    sm.output.csv,
    sm.output.md,
    sm.output.result,
    log,
    code=sm.params.code,
    figure=[sm.output.png, sm.output.svg],
)
# (a Namedlist: `in` alone would look among the paths, not the names)
if "split_csv" in sm.output.keys():  # noqa: SIM118
    compare_jobs.float64_job(
        sm.params.job,
        {k: sm.input[k] for k in compare_jobs.SPLIT_ROLES},
        sm.input.fixture,
        sm.output.result,
        {
            kind: {out: sm.output[f"{kind}_{out}"] for out in compare_jobs.FLOAT64_OUTPUTS}
            for kind in ("split", "diagnosis")
        },
        log,
        code=sm.params.code,
    )
