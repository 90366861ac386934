"""Snakemake job: gather every comparison into summary.csv (see parity.jobs.summary_job)."""

import sys

from parity import jobs, verdicts
from parity.experiments import Plan
from parity.fileio import job_logger

sm = snakemake  # noqa: F821
log = job_logger(sm.log[0])
rows = jobs.summary_job(Plan(sm.config), list(sm.input), sm.output.csv, sm.output.md)
log.info("%d rows", len(rows))
for r in rows:
    if r["verdict"] == verdicts.UNEXPECTED_PASS:
        # Loudly, on the console as well as in the log: a control lost its power.
        print(
            f"WARNING: negative control {r['experiment']} {r['comparison']} {r['device']} "
            "passed; the harness can no longer see this fault",
            file=sys.__stderr__,
        )
