"""Adapter body: one PyTorch run with the settings its rule resolved (see parity.train.torch)."""


def main(sm) -> None:
    """Train the run of ``sm.wildcards`` (experiment, run, dtype, device) from
    ``sm.input.fixture`` with ``sm.params.settings`` on ``sm.threads`` threads; write its
    trace to ``sm.output.trace``."""
    from parity.core.fileio import job_start

    # First, before the imports below (torch, numpy, pyarrow): the job's CPU priority.
    log = job_start(sm)

    from parity.plan.keys import RunKey
    from parity.train import torch as torch_runner

    w = sm.wildcards
    key = RunKey(w.experiment, w.run, w.dtype, w.device)
    torch_runner.train(key, sm.params.settings, sm.input.fixture, sm.output.trace, sm.threads, log)
