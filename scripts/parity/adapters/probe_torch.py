"""Adapter body: a batch of probes (every probe of one dtype and device) with PyTorch, in one
interpreter, each probe's result from the content cache when it holds it (see
parity.probe.batch; the interpreter is parity.probe.torch)."""


def main(sm) -> None:
    """Run the probes ``sm.params.probes`` in ``sm.wildcards`` (dtype, device) and write
    each one's outcomes to its output in ``sm.output``."""
    from parity.core.fileio import job_start

    # First, before the imports below (torch, numpy, pyarrow): the job's CPU priority.
    log = job_start(sm)

    import torch

    from parity.probe import batch as probe_batch
    from parity.probe import torch as probe_torch
    from parity.probe.format import Probe

    w = sm.wildcards
    batch = probe_batch.Batch("torch", w.dtype, w.device)
    probes = [Probe(**p) for p in sm.params.probes]
    runtime = {"torch": torch.__version__}
    if w.device == "cuda" and torch.cuda.is_available():
        runtime["gpu"] = torch.cuda.get_device_name()

    def compute(todo):
        """Every probe of ``todo`` run by parity.probe.torch, one after the other."""
        for probe in todo:
            log.info("probe %s", probe.name)
            outcomes = probe_torch.run(probe, batch.dtype, batch.device, sm.threads, log)
            yield probe.name, outcomes, probe_torch.runner_metadata(batch.device)

    probe_batch.run_batch(
        probes,
        batch,
        probe_batch.job_outputs(probes, batch, sm.output),
        probe_batch.identity(sm.params.code, sm.threads, **runtime),
        compute,
        log,
    )
