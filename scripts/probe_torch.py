"""Snakemake job: one probe run with PyTorch (see parity.probe_torch)."""

from parity import probe_torch
from parity.fileio import job_logger
from parity.probe_plan import ProbeKey
from parity.probe_results import write_results
from parity.probes import Probe

sm = snakemake  # noqa: F821
log = job_logger(sm.log[0])
w = sm.wildcards
probe = Probe(**sm.params.probe)
key = ProbeKey(w.probe, "torch", w.dtype, w.device)
outcomes = probe_torch.run(probe, key.dtype, key.device, sm.threads, log)
write_results(sm.output.result, probe, key, outcomes, probe_torch.runner_metadata(key.device))
log.info("wrote %s", sm.output.result)
