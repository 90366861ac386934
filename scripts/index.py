"""Snakemake job: the index of results/ (results/README.md, see parity.report.index), and
its sealed record (parity.report.sealed). Its other inputs (the pages it links to) are
there for order only: the record holds what the index is made of."""

from parity.core.fileio import job_start

sm = snakemake  # noqa: F821
# First, before the imports below (torch, numpy, pyarrow): the job's CPU priority.
log = job_start(sm)

from parity.report import sealed
from parity.report.index import write_index

made_from = sealed.read_inputs(sm.params.seal["inputs"])
write_index(sm.input.summary, sm.input.summary_sources, sm.input.get("probes"), sm.output.index)
sealed.seal_page(sm.params.seal, made_from, {"md": sm.output.index})
log.info("wrote %s", sm.output.index)
