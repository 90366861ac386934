"""Adapter body: one PyTorch run of an own model (the user's nn.Module; see
parity.own.torch_model and parity.train.torch)."""


def main(sm) -> None:
    """Train the own model's run of ``sm.wildcards`` from ``sm.input.fixture`` with
    ``sm.params.settings``; write its trace to ``sm.output.trace``. A run whose model makes
    no step for ``limits.user_code_idle_seconds`` is stopped (exit status
    ``parity.core.usercode.EXIT_STUCK``), its Python stack and one line saying where in the
    log."""
    from parity.core.fileio import job_start

    # First, before the imports below (torch, numpy, pyarrow): the job's CPU priority.
    log = job_start(sm)

    from parity.core import usercode
    from parity.own.torch_model import OwnNet
    from parity.plan.keys import RunKey
    from parity.train import torch as torch_runner

    w = sm.wildcards
    key = RunKey(w.experiment, w.run, w.dtype, w.device)
    settings = sm.params.settings
    # the user's code (import, factory, forward, optimizer) stopped when no step comes
    # within limits.user_code_idle_seconds, its stack in the log (parity.core.usercode)
    with usercode.watching(w.experiment, settings["model"]["torch"]):
        torch_runner.train(
            key, settings, sm.input.fixture, sm.output.trace, sm.threads, log, OwnNet
        )
