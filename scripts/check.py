"""Snakemake job: fail when any verdict, of a comparison or a probe, differs from its
expectation; first refuse every table, figure and page a person reads that is not what its
sealed record says or not current, and name each one no record covers."""

import sys

from parity.core.fileio import job_start

sm = snakemake  # noqa: F821
# First, before the imports below (torch, numpy, pyarrow): the job's CPU priority.
log = job_start(sm)

from parity.report.check import check

bad = check(
    sm.input.summary,
    log,
    sm.input.get("probes"),
    sm.input.summary_sources,
    sm.input.get("probes_sources"),
    params=sm.params.plan,
    say=print,
)
if bad:
    sys.exit(f"{len(bad)} verdict(s) differ from their expectation; see {sm.log[0]}")
