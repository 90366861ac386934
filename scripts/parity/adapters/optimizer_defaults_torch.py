"""Adapter body: PyTorch's optimizer defaults, read from torch itself
(parity.train.optimizer_defaults)."""


def main(sm) -> None:
    """Write PyTorch's optimizer defaults to ``sm.output[0]`` (sealed JSON)."""
    from parity.core.fileio import job_start

    # First, before the imports below (torch): the job's CPU priority.
    job_start(sm)

    from parity.train import optimizer_defaults

    optimizer_defaults.write(sm.output[0], optimizer_defaults.torch_defaults())
