"""Snakemake job: the provenance of every trace (see parity.report.pages.provenance), and
its sealed record (parity.report.sealed)."""

from parity.core.fileio import job_start

sm = snakemake  # noqa: F821
# First, before the imports below (torch, numpy, pyarrow): the job's CPU priority.
log = job_start(sm)

from parity.plan import limits
from parity.report import sealed
from parity.report.pages import provenance

made_from = sealed.read_inputs(sm.input)
# each trace within the config's limits, as the plan held its run to them
rows = provenance(list(sm.input), sm.output.csv, sm.output.md, limits.settings(sm.config))
sealed.seal_page(
    sm.params.seal, made_from, {"csv": sm.output.csv, "md": sm.output.md, "html": sm.output.html}
)
log.info("%d traces", len(rows))
