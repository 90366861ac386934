"""Snakemake job: the index of results/ (results/README.md, see parity.report.index), and
its sealed record (parity.report.sealed). Its other inputs (the pages it links to) are
there for order only: the record holds what the index is made of."""

from parity.core.fileio import job_start
from parity.report import sealed
from parity.report.index import write_index

sm = snakemake  # noqa: F821
log = job_start(sm)
made_from = sealed.read_inputs(sm.params.seal["inputs"])
write_index(sm.input.summary, sm.input.summary_sources, sm.input.get("probes"), sm.output.index)
sealed.seal_page(sm.params.seal, made_from, {"md": sm.output.index})
log.info("wrote %s", sm.output.index)
