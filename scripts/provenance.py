"""Snakemake job: the provenance of every trace (see parity.report.pages.provenance), and
its sealed record (parity.report.sealed)."""

from parity.core.fileio import job_start

sm = snakemake  # noqa: F821
# First, before the imports below (torch, numpy, pyarrow): the job's CPU priority.
log = job_start(sm)

from parity.report import sealed
from parity.report.pages import provenance

made_from = sealed.read_inputs(sm.input)
rows = provenance(list(sm.input), sm.output.csv, sm.output.md)
sealed.seal_page(
    sm.params.seal, made_from, {"csv": sm.output.csv, "md": sm.output.md, "html": sm.output.html}
)
log.info("%d traces", len(rows))
