"""Adapter body: localise one comparison, or skip it (see parity.localise.job)."""


def main(sm) -> None:
    """Localise the comparison ``sm.params.job`` from its per-step result
    ``sm.input.perstep`` (and diagnosis, when it has one); write ``sm.output.md`` and
    ``sm.output.result``."""
    from parity.core.fileio import job_start

    # First, before the imports below (torch, numpy, pyarrow): the job's CPU priority.
    log = job_start(sm)

    from parity.localise.job import localise

    localise(
        sm.params.job,
        sm.input.perstep,
        sm.input.get("diagnosis"),
        {k: sm.output[k] for k in ("md", "result")},
        log,
        sm.log[0],
        code=sm.params.code,
    )
