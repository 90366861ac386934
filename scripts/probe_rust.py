"""Snakemake job: one probe run with a Rust runner binary, candle-parity or burn-parity (see
parity.rust_probe); the rule names the framework."""

from parity import rust_probe
from parity.fileio import job_logger
from parity.probe_plan import ProbeKey
from parity.probes import Probe

sm = snakemake  # noqa: F821
log = job_logger(sm.log[0])
w = sm.wildcards
probe = Probe(**sm.params.probe)
key = ProbeKey(w.probe, sm.params.framework, w.dtype, w.device)
rust_probe.probe(probe, key, sm.input.binary, sm.output.result, sm.threads, log, sm.log[0])
