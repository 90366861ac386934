"""The Rust side of op probes: runs a runner binary's ``probe`` subcommand
(``candle-parity``, ``burn-parity``) on a batch of probes and turns its ``result`` frames
into probe outcomes (``parity.probe.results``). Kept apart from the training side
(:mod:`parity.train.rust`), so that a trace's code hash does not cover the probe maths.

The binary reads a ``ProbeBatch``, ``{"probes": [Probe.runner_spec(dtype, device), ...]}``
(``rust/parity-common/src/probe_spec/op.rs``), and writes a header frame, then per probe in
batch order, per case, per quantity one ``result`` frame (metadata ``probe``, ``case``,
``quantity``, ``status``, ``message``; tensor ``values`` when ok), then one ``end`` frame.
It runs the binary itself (not ``rust_runner.run_frames``) to read what a runner that
died part-way had written.
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from parity.core.watchdog import run_captured
from parity.probe import api_limits
from parity.probe.format import Probe
from parity.probe.plan import ProbeKey
from parity.probe.results import OK, Outcome, write_results
from parity.trace.frames import Frame, FrameError, read_buffer
from parity.trace.provenance import probe_metadata
from parity.train.rust import RunnerError, check_binary, invocation, log_tail

HEADER_RUNNER_KEYS = ("compiler", "device_detail", "features")
#: Signals a process raises on itself when it faults (a segfault, an abort, a bus error, a
#: floating-point or an illegal-instruction trap): a runner killed by one of them crashed
#: on the probe it was running.
CRASH_SIGNALS = frozenset(
    int(s) for s in (signal.SIGSEGV, signal.SIGABRT, signal.SIGBUS, signal.SIGFPE, signal.SIGILL)
)


def batch_spec(probes: Sequence[Probe], dtype: str, device: str) -> dict:
    """The ``ProbeBatch`` JSON a runner's ``probe --spec`` reads: every probe's runner spec
    in ``dtype`` on ``device``, in the given order."""
    return {"probes": [p.runner_spec(dtype, device) for p in probes]}


def batch_outcomes(
    frames: Sequence[Frame], probes: Sequence[Probe], framework: str, name: str
) -> tuple[dict, dict[str, list[Outcome]]]:
    """The outcomes of a batch's frame stream (``frames``, from runner ``name``), by probe.

    Returns (metadata for ``results.write_results``: framework version, host, runner
    from the header; outcomes by probe name, each in stream order). Raises
    :class:`RunnerError` when the stream lacks its header or end frame, its header names
    another framework than ``framework``, a frame is not a ``result`` frame, a result
    names no probe, a probe not in the batch, or breaks the batch's order (each probe's
    results together, the probes in batch order), or a probe has no result at all.
    Whether each probe's rows are its quantities is ``write_results``' check.
    """
    if not frames or frames[0].kind != "header" or frames[-1].kind != "end":
        raise RunnerError(f"{name} probe stream lacks its header or end frame")
    header = frames[0].meta
    if header.get("framework") != framework:
        raise RunnerError(
            f"{name} reports framework {header.get('framework')!r}, expected {framework!r}"
        )
    order = [p.name for p in probes]
    out: dict[str, list[Outcome]] = {}
    current = None
    for frame in frames[1:-1]:
        m = frame.meta
        if frame.kind != "result":
            raise RunnerError(f"unexpected {frame.kind!r} frame in a probe stream")
        probe = m.get("probe")
        if probe is None:
            raise RunnerError(f"{name}: a result frame names no probe (a runner without batches?)")
        if probe not in order:
            raise RunnerError(f"{name}: a result for probe {probe!r}, not in the batch")
        if probe != current:
            if probe in out or (current is not None and order.index(probe) < order.index(current)):
                raise RunnerError(f"{name}: the results of probe {probe!r} are out of batch order")
            current = probe
            out[probe] = []
        out[probe].append(_outcome(frame))
    missing = [p for p in order if p not in out]
    if missing:
        raise RunnerError(f"{name} wrote no result for probe(s) {', '.join(missing)}")
    runner = {k: header[k] for k in HEADER_RUNNER_KEYS}
    runner["threads"] = int(header["threads"])
    return probe_metadata(header["framework_version"], runner), out


def _outcome(frame: Frame) -> Outcome:
    """The outcome one ``result`` frame reports."""
    m = frame.meta
    if m["status"] == OK:
        values = frame.tensors["values"]
        return Outcome.ok(m["case"], m["quantity"], values, values.shape)
    return Outcome(m["case"], m["quantity"], m["status"], message=m.get("message") or None)


def crashed_probe(frames: Sequence[Frame], probe: Probe, why: str) -> list[Outcome]:
    """The outcomes of ``probe``, during which the runner crashed: the quantities whose
    ``result`` frames arrived (``frames``, the stream before the crash) as reported, every
    other one a framework error saying ``why``."""
    arrived = {
        (f.meta["case"], f.meta["quantity"]): _outcome(f)
        for f in frames
        if f.kind == "result" and f.meta.get("probe") == probe.name
    }
    return [arrived.get((c, q)) or Outcome.error(c, q, why) for c, q in probe.quantities()]


def _read_partial(data: bytes) -> list[Frame]:
    """The frames of ``data`` up to the first malformed or truncated one."""
    out: list[Frame] = []
    try:
        for f in read_buffer(data):
            out.append(f)
    except FrameError:
        pass
    return out


def complete_probes(
    frames: Sequence[Frame], probes: Sequence[Probe], framework: str, name: str
) -> tuple[dict, dict[str, list[Outcome]]]:
    """From the stream of a runner that failed part-way (``frames``: what it wrote before
    it died, no ``end`` frame), the probes whose every quantity arrived, in batch order:
    (metadata, outcomes by probe name), as :func:`batch_outcomes`. Nothing (``({}, {})``)
    when the stream has no header of ``framework`` or is malformed before its end."""
    if not frames or frames[0].kind != "header" or frames[0].meta.get("framework") != framework:
        return {}, {}
    body = [f for f in frames[1:] if f.kind == "result"]
    done: list[Probe] = []
    at = 0
    for p in probes:
        n = len(p.quantities())
        chunk = body[at : at + n]
        if len(chunk) < n or any(f.meta.get("probe") != p.name for f in chunk):
            break
        done.append(p)
        at += n
    if not done:
        return {}, {}
    try:
        return batch_outcomes(
            [frames[0], *body[:at], Frame({"kind": "end"})], done, framework, name
        )
    except RunnerError:
        return {}, {}


def run_batch(
    probes: Sequence[Probe],
    framework: str,
    dtype: str,
    device: str,
    binary: str,
    threads: int,
    log: logging.Logger,
    log_path: str | None,
    build: Mapping[str, str] | None = None,
) -> Iterator[tuple[str, list[Outcome], dict]]:
    """Run ``probes`` in ``dtype`` on ``device`` with ONE invocation of the Rust runner of
    ``framework`` (``binary``) and yield (probe name, outcomes, metadata) per probe, in
    batch order (``probe_batch.Compute``), as :func:`run_runner` does.

    First the binary's build record is checked (``parity.train.rust.check_binary``), held
    to ``build`` when given (the rule's param: the binary's name and source id as this
    checkout and config build it): another build's binary copied in with its record
    raises :class:`RunnerError` before any probe runs. Each probe's metadata records the
    record's source id (``runner.source_id``), which the probe table holds to this
    checkout's (``results.read_results``).

    A case that meets a documented API limit of the framework
    (``parity.probe.api_limits``) is not sent: each of its quantities is ``unsupported``
    with the limit's message. A probe left without cases is not sent at all (its metadata
    is that of the batch's runner; with nothing to send, the runner runs an empty batch
    for its header).
    """
    record = check_binary(binary, build)
    limited = {p.name: api_limits.case_limits(p, framework) for p in probes}
    sent = [
        r for p in probes if (r := api_limits.without_cases(p, list(limited[p.name]))) is not None
    ]
    for p in probes:
        for case, lim in limited[p.name].items():
            log.info("%s %s: unsupported, not run: %s", p.name, case, lim.message())
    pending = list(probes)
    metadata: dict = {}
    runs = ()
    if sent:
        runs = run_runner(sent, framework, dtype, device, binary, threads, log, log_path)
    for name, outcomes, metadata in runs:
        while pending[0].name != name:
            p = pending.pop(0)
            yield p.name, api_limits.merge(p, [], limited[p.name]), _built(metadata, record)
        p = pending.pop(0)
        yield name, api_limits.merge(p, outcomes, limited[name]), _built(metadata, record)
    if pending and not metadata:
        metadata = header_metadata(framework, binary, threads, log_path)
    for p in pending:
        yield p.name, api_limits.merge(p, [], limited[p.name]), _built(metadata, record)


def _built(metadata: dict, record: Mapping) -> dict:
    """``metadata`` (``probe_metadata``) with the source id of the binary's build record
    as ``runner.source_id``: which build made the results."""
    if isinstance(metadata.get("runner"), dict):
        metadata["runner"]["source_id"] = record.get("source_id")
    return metadata


def header_metadata(framework: str, binary: str, threads: int, log_path: str | None) -> dict:
    """The metadata of the runner's header (``batch_outcomes``' first value), from a run
    of an empty batch: for a batch whose every case meets an API limit. Its header
    describes the CPU (a runner opens no other device for an empty batch)."""
    name = Path(binary).name
    with invocation({"probes": []}, threads, log_path) as (spec_path, env, stderr):
        cmd = [binary, "probe", "--spec", spec_path, "--out", "-"]
        what = f"the {framework} op probes (an empty batch)"
        status, stdout, stopped = run_captured(cmd, what, env, stderr)
    if stopped:
        raise RunnerError(stopped)
    if status != 0:
        raise RunnerError(f"{name} probe exited with status {status} on an empty batch")
    frames = list(read_buffer(stdout))
    return batch_outcomes(frames, [], framework, name)[0]


def run_runner(
    probes: Sequence[Probe],
    framework: str,
    dtype: str,
    device: str,
    binary: str,
    threads: int,
    log: logging.Logger,
    log_path: str | None,
) -> Iterator[tuple[str, list[Outcome], dict]]:
    """Run ``probes`` in ``dtype`` on ``device`` with ONE invocation of the Rust runner of
    ``framework`` (``binary``) and yield (probe name, outcomes, metadata) per probe, in
    batch order.

    The framework's errors, missing gradients and unsupported ops arrive as outcomes.
    A runner killed by a :data:`CRASH_SIGNALS` signal after its header (a segfault or an
    abort inside the framework) costs only the probe it was running: the probes before it
    are kept, that probe's missing quantities are framework errors naming the crash
    (:func:`crashed_probe`), and the probes after it run in a new invocation.

    Raises :class:`RunnerError` when the binary exits non-zero otherwise (a spec it
    refuses, a missing device, a crash before its header), is stopped for making no
    progress (:mod:`parity.core.watchdog`), or its stream is malformed
    (:func:`batch_outcomes`); the probes whose results all arrived are yielded first
    (:func:`complete_probes`), so that the batch's cache keeps them.
    """
    name = Path(binary).name
    check_binary(binary)
    spec = batch_spec(probes, dtype, device)
    with invocation(spec, threads, log_path) as (spec_path, env, stderr):
        cmd = [binary, "probe", "--spec", spec_path, "--out", "-"]
        what = f"the {framework} op probes ({dtype}, {device})"
        status, stdout, stopped = run_captured(cmd, what, env, stderr)
    if status != 0:
        partial = _read_partial(stdout)
        metadata, outcomes = complete_probes(partial, probes, framework, name)
        done = [p for p in probes if p.name in outcomes]
        yield from _report(done, outcomes, metadata, log)
        if not stopped and -status in CRASH_SIGNALS and metadata:
            # A fault of the process itself (a segfault or an abort in the framework) while
            # running the probe after the finished ones: a crash is that probe's outcome,
            # and the rest run in a new process. A runner stopped from outside (SIGINT,
            # SIGTERM, SIGKILL) is no outcome of its probe: the job fails.
            culprit = probes[len(done)]
            sig = signal.Signals(-status).name
            why = f"{name} crashed ({sig}) while running this probe"
            log.error("%s: %s", culprit.name, why)
            outcomes = {culprit.name: crashed_probe(partial, culprit, why)}
            yield from _report([culprit], outcomes, metadata, log)
            rest = probes[len(done) + 1 :]
            if rest:
                yield from run_runner(
                    rest, framework, dtype, device, binary, threads, log, log_path
                )
            return
        kept = f" ({len(done)} probe(s) before it kept)" if done else ""
        if stopped:
            raise RunnerError(f"{stopped}{kept}")
        tail = log_tail(log_path) if log_path else ""
        raise RunnerError(
            f"{name} probe exited with status {status}{kept}; last lines of its log:\n{tail}"
        )
    try:
        frames = list(read_buffer(stdout))
    except FrameError as e:
        raise RunnerError(f"malformed frame stream from {name} probe: {e}") from e
    metadata, outcomes = batch_outcomes(frames, probes, framework, name)
    yield from _report(probes, outcomes, metadata, log)


def _report(probes, outcomes, metadata, log):
    for p in probes:
        for o in outcomes[p.name]:
            log.info("%s %s %s: %s %s", p.name, o.case, o.quantity, o.status, o.message or "")
        yield p.name, outcomes[p.name], metadata


def probe(
    probe: Probe,
    key: ProbeKey,
    binary: str,
    out: str,
    threads: int,
    log: logging.Logger,
    log_path: str | None,
) -> None:
    """Run one probe (a batch of one, :func:`run_batch`) in ``key.dtype`` on ``key.device``
    with the Rust runner of ``key.framework`` and write its results to ``out``
    (``results.write_results``). Raises :class:`RunnerError` as :func:`run_batch`
    does; nothing is written then."""
    ((_, outcomes, metadata),) = run_batch(
        [probe], key.framework, key.dtype, key.device, binary, threads, log, log_path
    )
    write_results(out, probe, key, outcomes, metadata)
    log.info("wrote %s", out)
