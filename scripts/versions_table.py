"""Snakemake job: the release matrix, which releases of candle and burn have each known
fault (see parity.report.versions.versions_table), and its sealed record
(parity.report.sealed)."""

from parity.core.fileio import job_start

sm = snakemake  # noqa: F821
# First, before the imports below (torch, numpy, pyarrow): the job's CPU priority.
log = job_start(sm)

from parity.report import sealed
from parity.report.versions import versions_table

made_from = sealed.read_inputs(sm.input)
versions_table(
    sm.params.matrix,
    sm.input.summary,
    getattr(sm.input, "probes", None),
    sm.output.csv,
    sm.output.md,
    log,
)
sealed.seal_page(
    sm.params.seal, made_from, {"csv": sm.output.csv, "md": sm.output.md, "html": sm.output.html}
)
