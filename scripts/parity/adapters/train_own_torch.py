"""Adapter body: one PyTorch run of an own model (the user's nn.Module; see
parity.own.torch_model and parity.train.torch)."""


def main(sm) -> None:
    """Train the own model's run of ``sm.wildcards`` from ``sm.input.fixture`` with
    ``sm.params.settings``; write its trace to ``sm.output.trace``."""
    from parity.core.fileio import job_start

    # First, before the imports below (torch, numpy, pyarrow): the job's CPU priority.
    log = job_start(sm)

    from parity.own.torch_model import OwnNet
    from parity.plan.keys import RunKey
    from parity.train import torch as torch_runner

    w = sm.wildcards
    key = RunKey(w.experiment, w.run, w.dtype, w.device)
    torch_runner.train(
        key, sm.params.settings, sm.input.fixture, sm.output.trace, sm.threads, log, OwnNet
    )
