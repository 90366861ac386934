"""The Rust side of op probes: runs a runner binary's ``probe`` subcommand
(``candle-parity``, ``burn-parity``) on a probe's spec (``Probe.runner_spec``) and writes its
``result`` frames as probe results (``probe_results``). Kept apart from the training side
(:mod:`parity.rust_runner`), so that a trace's code hash does not cover the probe maths.
"""

from __future__ import annotations

import logging
from pathlib import Path

from .probe_plan import ProbeKey
from .probe_results import OK, Outcome, write_results
from .probes import Probe
from .provenance import probe_metadata
from .rust_runner import RunnerError, run_frames

HEADER_RUNNER_KEYS = ("compiler", "device_detail", "features")


def probe(
    probe: Probe,
    key: ProbeKey,
    binary: str,
    out: str,
    threads: int,
    log: logging.Logger,
    log_path: str | None,
) -> None:
    """Run ``probe`` in ``key.dtype`` on ``key.device`` with the Rust runner of
    ``key.framework`` (``binary``: candle-parity or burn-parity, whose ``probe`` subcommand
    writes one ``result`` frame per quantity) and write its results to ``out``
    (``probe_results.write_results``).

    The framework's errors, missing gradients and unsupported ops arrive as outcomes. Raises
    :class:`RunnerError` when the binary exits non-zero (a spec it refuses, a missing
    device), its header names another framework, or its stream is malformed; nothing is
    written then.
    """
    name = Path(binary).name
    spec = probe.runner_spec(key.dtype, key.device)
    frames = run_frames(binary, ["probe"], spec, threads, log_path)
    if not frames or frames[0].kind != "header" or frames[-1].kind != "end":
        raise RunnerError(f"{name} probe stream lacks its header or end frame")
    header = frames[0].meta
    if header.get("framework") != key.framework:
        raise RunnerError(
            f"{name} reports framework {header.get('framework')!r}, expected {key.framework!r}"
        )
    outcomes = []
    for frame in frames[1:-1]:
        m = frame.meta
        if frame.kind != "result":
            raise RunnerError(f"unexpected {frame.kind!r} frame in a probe stream")
        if m["status"] == OK:
            values = frame.tensors["values"]
            outcomes.append(Outcome.ok(m["case"], m["quantity"], values, values.shape))
        else:
            outcomes.append(
                Outcome(m["case"], m["quantity"], m["status"], message=m.get("message") or None)
            )
        log.info("%s %s: %s %s", m["case"], m["quantity"], m["status"], m.get("message", ""))
    runner = {k: header[k] for k in HEADER_RUNNER_KEYS}
    runner["threads"] = int(header["threads"])
    metadata = probe_metadata(header["framework_version"], runner)
    write_results(out, probe, key, outcomes, metadata)
    log.info("wrote %s", out)
