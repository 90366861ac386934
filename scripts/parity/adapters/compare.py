"""Adapter body (rules compare and perstep): the tables and figures of one comparison, in one
process: always the per-step table; with float64 runs (rule compare) the float64 split and
the diagnosis too (see parity.compare.job.compare)."""


def main(sm) -> None:
    """Compare the traces of ``sm.input`` (every input but ``fixture``) against
    ``sm.input.fixture`` as ``sm.params.job`` says; write every output of ``sm.output``."""
    from parity.core.fileio import job_start

    # First, before the imports below (numpy, pyarrow, matplotlib): the job's CPU priority.
    log = job_start(sm)

    from parity.compare.job import compare

    traces = {k: sm.input[k] for k in sm.input.keys() if k != "fixture"}  # noqa: SIM118
    outputs = {k: sm.output[k] for k in sm.output.keys()}  # noqa: SIM118
    compare(sm.params.job, traces, sm.input.fixture, outputs, log, code=sm.params.code)
