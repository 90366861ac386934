"""Snakemake job: the release matrix, which releases of candle and burn have each known
fault (see parity.report.matrix.versions_table), and its sealed record
(parity.report.sealed)."""

from parity.core.fileio import job_start
from parity.report import sealed
from parity.report.matrix import versions_table

sm = snakemake  # noqa: F821
log = job_start(sm)
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
