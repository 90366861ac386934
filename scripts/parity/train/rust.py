"""The Rust side of training: runs a runner binary (``candle-parity``, ``burn-parity``) and
writes its frames as a trace. Its op probes are :mod:`parity.probe.rust`.

The binary gets a JSON spec (``runspec.runner_spec``) and streams
frames on standard output (``rust/parity-common/src/frames.rs``); its standard error
(progress, errors) goes to the job's log. No shell is involved: arguments are passed
as a list.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from parity.core import integrity
from parity.core.models import model_params
from parity.core.warm import MALLOC_TUNABLES
from parity.core.watchdog import Watch, run_captured
from parity.plan.keys import RunKey
from parity.plan.limits import non_finite
from parity.plan.runspec import runner_spec
from parity.trace import fixtures
from parity.trace.frames import Frame, FrameError, read_buffer, read_frames
from parity.trace.provenance import trace_metadata
from parity.trace.schema import TraceLayout, extra_column
from parity.trace.writer import TraceWriter


class RunnerError(RuntimeError):
    """The binary failed; the message carries its exit status and the tail of its stderr."""


def check_binary(binary: str, build: Mapping[str, str] | None = None) -> dict:
    """The build record of ``binary`` when it is the build's and, with ``build`` (``binary``
    and ``source_id``: what this checkout and config build, ``parity.plan.builds``), that
    build's (``integrity.check_binary``); raises :class:`RunnerError` naming it, both
    builds and what to do otherwise."""
    try:
        return integrity.check_binary(binary, build)
    except integrity.BinaryError as e:
        raise RunnerError(str(e)) from None


def log_tail(path: str, lines: int = 20) -> str:
    try:
        return "".join(Path(path).read_text(errors="replace").splitlines(True)[-lines:])
    except OSError:
        return ""


def spec_json(spec: Mapping[str, Any]) -> str:
    """The JSON text of a spec for a Rust runner. JSON has no NaN or Infinity (serde refuses
    them with a message that names no field), so a spec holding one is refused here, naming
    its fields. Raises :class:`RunnerError`."""
    bad = [f"{where} = {value}" for where, value in non_finite(spec)]
    if bad:
        raise RunnerError(f"the runner spec holds non-finite numbers: {', '.join(bad)}")
    return json.dumps(spec, indent=1, allow_nan=False)


#: Bytes the pipe from a training runner holds (Linux's default is 64 KiB, and 1 MiB is the
#: most an unprivileged process may ask for by default, ``/proc/sys/fs/pipe-max-size``).
#: A recorded step of the scale MLP is 7.4 MB: through 64 KiB the runner and this process
#: took turns about 115 times a step. With 1 MiB, recording every step of its candle run
#: cost 8.2 s of training against 9.1 s (6.4 s recording nothing; medians of four
#: interleaved runs, docs/performance.md, "Recording overhead").
PIPE_BYTES = 1 << 20


def widen_pipe(fd: int, size: int = PIPE_BYTES) -> int:
    """Ask Linux to let the pipe ``fd`` hold ``size`` bytes (``F_SETPIPE_SZ``); returns the
    size it now holds, or 0 where the platform or the system's limit does not allow it (the
    pipe is then left as it was: only slower)."""
    import fcntl

    if not hasattr(fcntl, "F_SETPIPE_SZ"):
        return 0
    try:
        return fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, size)
    except OSError:
        return 0


@contextlib.contextmanager
def invocation(spec: dict, threads: int, log_path: str | None):
    """One runner invocation's spec file (temporary JSON), environment
    (``RAYON_NUM_THREADS``: the Rust runners' CPU thread pool; ``GLIBC_TUNABLES``:
    :data:`MALLOC_TUNABLES` unless the environment sets it) and stderr sink (the job's
    log); the file is removed afterwards."""
    env = dict(os.environ, RAYON_NUM_THREADS=str(threads))
    env.setdefault("GLIBC_TUNABLES", MALLOC_TUNABLES)
    text = spec_json(spec)
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        f.write(text)
    stderr = open(log_path, "ab") if log_path else None  # noqa: SIM115
    try:
        yield f.name, env, stderr
    finally:
        os.unlink(f.name)
        if stderr:
            stderr.close()


def train(
    key: RunKey,
    settings: Mapping[str, Any],
    fixture: str,
    binary: str,
    out: str,
    threads: int,
    log: logging.Logger,
    log_path: str | None,
    build: Mapping[str, str] | None = None,
) -> None:
    """Run ``key``, with resolved ``settings`` (``resolve.resolve_run``), by its framework's
    binary from the fixture ``fixture`` and write its trace to ``out``.

    ``threads`` sets ``RAYON_NUM_THREADS`` (the Rust runners' CPU thread pool); ``build``
    (the rule's param, ``Plan.build_identity``) is the binary's name and source id as this
    checkout and config build it, which its build record must hold (:func:`check_binary`:
    another build's binary copied in with its record is refused before it runs). Raises
    :class:`RunnerError` for such a binary, when the binary exits non-zero or its stream
    is malformed, and
    ``fixtures.FixtureError`` for a fixture that does not match its checksum; the trace is
    then not written. A framework error during a step, which the binary reports in its
    ``end`` frame (status ``failed``, the step, the error), is written as a trace with
    status ``failed``: the steps before it are kept and the comparison reports it.
    """
    s = settings
    identity = check_binary(binary, build)
    # The binary reads it itself: refuse a corrupt or mismatched one here first, as the
    # PyTorch runner does, naming the tensor.
    fixtures.check(fixture, fixtures.load(fixture), s)
    spec = runner_spec(key, s, fixture)
    names = spec["record"]["tensors"] or [n for n, _ in model_params(s["model"])]
    extras = []
    if spec["record"]["grads"]:
        extras += [extra_column("grad", n) for n in names]
    if spec["record"]["moments"]:
        extras += [extra_column(k, n) for n in names for k in ("exp_avg", "exp_avg_sq")]
    shapes = dict(model_params(s["model"]))
    layout = TraceLayout.of(key.dtype, [(n, shapes[n]) for n in names], extras)

    log.info("run spec %s", json.dumps(spec, sort_keys=True))
    with invocation(spec, threads, log_path) as (spec_path, env, stderr):
        proc = subprocess.Popen(
            [binary, "train", "--spec", spec_path, "--out", "-"],
            stdout=subprocess.PIPE,
            stderr=stderr,
            env=env,
        )
        widen_pipe(proc.stdout.fileno())
        watch = Watch(proc, f"{key.experiment}: the {key.label} run's training", binary, stderr)
        try:
            with watch:
                stdout = watch.reader(proc.stdout)
                _consume(key, settings, fixture, proc, stdout, layout, out, log, binary, identity)
        except RunnerError as e:
            proc.kill()
            proc.wait()
            if watch.stopped:
                raise RunnerError(watch.stopped) from None
            tail = log_tail(log_path) if log_path else ""
            raise RunnerError(f"{e}; last lines of its log:\n{tail}") from None
        except BaseException:
            proc.kill()
            proc.wait()
            raise


def _consume(key, settings, fixture, proc, stdout, layout, out, log, binary, identity) -> None:
    # A step frame holds at most one row of the layout (and its loss) plus its header, so
    # a corrupted length cannot make this read gigabytes.
    frames = read_frames(stdout, max_frame=2 * layout.row_bytes() + (1 << 20))
    writer = None
    try:
        header = next(frames, None)
        if header is None or header.kind != "header":
            proc.wait()
            raise RunnerError(f"{binary} exited with status {proc.returncode} before its header")
        m = header.meta
        runner = {k: m[k] for k in ("compiler", "device_detail", "features", "optimizer_impl")}
        runner["threads"] = int(m["threads"])
        # which build ran: the binary's sha256 and source id, checked before it started
        runner["binary_sha256"] = identity["binary_sha256"]
        runner["source_id"] = identity["source_id"]
        meta = trace_metadata(key, settings, fixture, m["framework_version"], runner)
        writer = TraceWriter(out, layout, meta)
        ended = False
        for frame in frames:
            if frame.kind == "step":
                t = frame.tensors
                loss = float(t.pop("loss")[0]) if "loss" in t else None
                # the frame's arrays are views of its own buffer: nothing else holds them
                writer.write_step(
                    int(frame.meta["step"]), loss, t, handed_over=True, scalars=pop_scalars(t)
                )
            elif frame.kind == "end":
                ended = True
                if "train_seconds" in frame.meta:
                    writer.meta["runner"]["train_seconds"] = float(frame.meta["train_seconds"])
                if frame.meta.get("status") == "failed":
                    # The framework's own error during a step: a finding, recorded.
                    step, error = int(frame.meta["step"]), frame.meta.get("error", "")
                    log.error("%s failed at step %d: %s", key.label, step, error)
                    writer.fail(step, error)
        status = proc.wait()
        if status != 0 or not ended:
            raise RunnerError(
                f"{binary} exited with status {status}"
                + ("" if ended else " without finishing its stream")
            )
        writer.close()
        log.info("wrote %s (%s)", out, writer.meta["status"])
    except BaseException as e:
        if writer is not None:
            writer.abort(type(e), e, None)
        if isinstance(e, FrameError):
            raise RunnerError(f"malformed frame stream from {binary}: {e}") from e
        raise


def pop_scalars(tensors: dict) -> dict | None:
    """The training loop's scalars of a step frame (``scalar:lr``, ``scalar:grad_norm``,
    ``scalar:clip_coef``, float64; ``parity_common::optim::Scalars``), taken out of its
    ``tensors``; None for a frame without them (a run without a loop, step 0)."""
    if "scalar:lr" not in tensors:
        return None
    clip = tensors.pop("scalar:clip_coef", None)
    return {
        "lr": [float(x) for x in tensors.pop("scalar:lr")],
        "grad_norm": float(tensors.pop("scalar:grad_norm")[0]),
        "clip_coef": None if clip is None else float(clip[0]),
    }


def run_frames(
    binary: str,
    subcommand: list[str],
    spec: dict,
    threads: int,
    log_path: str | None,
    what: str | None = None,
    build: Mapping[str, str] | None = None,
) -> list[Frame]:
    """Run ``binary`` with ``subcommand`` (``["probe"]``, ``["replay", "--step", "3", …]``)
    and ``--spec`` (``spec`` in a temporary file), its frames written to standard output and
    its standard error to the job's log, under the user-code watchdog
    (:class:`parity.core.watchdog.Watch`; ``what`` names the work in its messages); returns
    the decoded frames. Raises :class:`RunnerError` when it exits non-zero (with the last
    lines of its log), is stopped for making no progress, or its stream is malformed."""
    name = f"{Path(binary).name} {subcommand[0]}"
    check_binary(binary, build)  # ``build``: what its build record must hold, if given
    with invocation(spec, threads, log_path) as (spec_path, env, stderr):
        cmd = [binary, *subcommand, "--spec", spec_path, "--out", "-"]
        status, stdout, stopped = run_captured(cmd, what or name, env, stderr)
    if stopped:
        raise RunnerError(stopped)
    if status != 0:
        tail = log_tail(log_path) if log_path else ""
        raise RunnerError(f"{name} exited with status {status}; last lines of its log:\n{tail}")
    try:
        return list(read_buffer(stdout))
    except FrameError as e:
        raise RunnerError(f"malformed frame stream from {name}: {e}") from e


def replay(
    key: RunKey,
    settings: Mapping[str, Any],
    fixture: str,
    binary: str,
    state_path: str,
    step: int,
    threads: int,
    log_path: str | None,
    build: Mapping[str, str] | None = None,
) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """Same-state replay of step ``step`` of run ``key`` by its framework's binary
    (``replay`` subcommand; ``rust/parity-common/src/replay.rs``), from the state file
    ``state_path`` (parameters after step − 1, Adam/AdamW moments).

    Returns (tensors, header): the ``replay`` frame's flat arrays in the run dtype, and the
    header's metadata with the frame's ``missing`` list (``name: reason; …``) added.
    Raises :class:`RunnerError` as :func:`run_frames` does (``build``: what the binary's
    build record must hold), or for a stream other than a header, one replay frame and an
    end frame.
    """
    spec = runner_spec(key, settings, fixture)
    args = ["replay", "--state", state_path, "--step", str(step)]
    what = f"{key.experiment}: the {key.label} run's replay of step {step}"
    frames = run_frames(binary, args, spec, threads, log_path, what, build)
    kinds = [f.kind for f in frames]
    if kinds != ["header", "replay", "end"]:
        raise RunnerError(f"{binary} replay wrote frames {kinds}, not header, replay, end")
    header = dict(frames[0].meta)
    header["missing"] = frames[1].meta.get("missing", "")
    return dict(frames[1].tensors), header
