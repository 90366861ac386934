"""A subprocess that runs the user's own Python code (the model card's,
``python -m parity.own.card``), watched: its output relayed and never parsed, its result
read from a file, and the process stopped when it makes no progress for
``limits.user_code_idle_seconds`` (:mod:`parity.core.usercode` has the in-process side,
and what progress is). Standard library only: the plan runs this while the DAG is built.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

from parity.core import usercode
from parity.core.usercode import KEY, UserCodeStuck, where_in

#: Seconds a watched subprocess may take before its first progress (the interpreter's and
#: torch's start, not the user's code) when the limit is shorter.
STARTUP_SECONDS = 120.0
#: Seconds a stuck subprocess is given to write its Python stack before it is killed.
STACK_SECONDS = 2.0
#: Lines of a subprocess's output kept for a message.
TAIL_LINES = 200


def _seconds(s: float) -> str:
    return f"{s:.0f} s" if s >= 1 else f"{s:.2g} s"


#: One frame of a faulthandler dump: ``  File "/x/model.py", line 3 in <module>``.
_DUMP_FRAME = re.compile(r'^\s*File "(.*)", line (\d+) in (.*)$')


def where_in_dump(lines: Sequence[str], folder: Path | None) -> str:
    """:func:`where_in` for a faulthandler dump's text (most recent call first): its first
    thread's frames."""
    frames: list[traceback.FrameSummary] = []
    started = False
    for line in lines:
        m = _DUMP_FRAME.match(line)
        if m:
            started = True
            frames.append(traceback.FrameSummary(m[1], int(m[2]), m[3], line=""))
        elif started:
            break
    return where_in(list(reversed(frames)), folder)


def run_watched(
    argv: Sequence[str],
    what: str,
    limit: float,
    *,
    cwd: str | os.PathLike | None = None,
    env: Mapping[str, str] | None = None,
    prefix: str = "",
    stream: TextIO | None = None,
    folder: Path | None = None,
    progress_file: str | os.PathLike | None = None,
) -> tuple[int, list[str]]:
    """Run ``argv``, a process that runs user code, in its own session: its standard output
    and error, merged, relayed line by line to ``stream`` (default ``sys.stderr``), each
    prefixed with ``prefix``, and never parsed (the process writes its result to a file).

    Progress is a line of its output, or a line it adds to ``progress_file`` (a child that
    called :func:`report_to` with it: :func:`progress` before each call into the user's
    code, so the interpreter's and torch's start do not count against the user's code).
    While none comes, a line every ``usercode.PROGRESS_SECONDS`` (``waiting on <what> (pid N)
    for 30 s; limits.user_code_idle_seconds is 600``). Until the first, the child may take
    :data:`STARTUP_SECONDS` if that is longer than ``limit``.

    Returns (exit status, its last :data:`TAIL_LINES` lines of output). Raises
    :class:`UserCodeStuck` after ``limit`` seconds without progress: the child is sent
    SIGUSR1 (a child that registered ``faulthandler`` on it writes its stack, which is
    relayed) and then killed with its process group; the message names ``what``, the pid,
    what it was doing (its last progress line) and the innermost frame of its stack in
    ``folder``."""
    out = stream if stream is not None else sys.stderr
    proc = subprocess.Popen(
        list(argv),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        cwd=cwd,
        env=None if env is None else dict(env),
        start_new_session=True,
    )
    tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
    # the time of the last line; the lines since the stack was asked for (a list), or None
    state: dict[str, Any] = {"last": time.monotonic(), "dump": None}

    def relay() -> None:
        for raw in proc.stdout:
            text = raw.decode("utf-8", errors="replace").rstrip("\r\n")
            tail.append(text)
            if state["dump"] is not None:
                state["dump"].append(text)
            state["last"] = time.monotonic()
            with contextlib.suppress(Exception):
                out.write(f"{prefix}{text}\n")
                out.flush()

    reader = threading.Thread(target=relay, name="user-code-output", daemon=True)
    reader.start()
    lines, seen, size, doing = 0, state["last"], 0, ""
    try:
        while True:
            try:
                proc.wait(timeout=usercode.POLL_SECONDS)
                break
            except subprocess.TimeoutExpired:
                pass
            now_size = _size(progress_file)
            if now_size != size:
                size, doing, state["last"] = now_size, _last_line(progress_file), time.monotonic()
            if state["last"] != seen:
                seen, lines = state["last"], 0
            idle = time.monotonic() - seen
            allowed = limit if size or len(tail) else max(limit, STARTUP_SECONDS)
            if idle >= allowed:
                where = _stop(proc, reader, state, folder)
                raise UserCodeStuck(
                    f"{what} (pid {proc.pid}) made no progress for {_seconds(idle)}"
                    f"{f', in {doing}' if doing else ''}: stopped"
                    f"{f' at {where}' if where else ''} ({KEY} is {limit:g}; raise it if the "
                    "code needs longer)"
                )
            if idle >= (lines + 1) * usercode.PROGRESS_SECONDS:
                lines += 1
                with contextlib.suppress(Exception):
                    out.write(
                        f"waiting on {what} (pid {proc.pid}){f', in {doing},' if doing else ''}"
                        f" for {_seconds(lines * usercode.PROGRESS_SECONDS)}; {KEY} is {limit:g}\n"
                    )
                    out.flush()
    except BaseException:
        if proc.poll() is None:  # interrupted here (Ctrl-C): the child goes too
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        raise
    # a process the user's code started may hold the pipe open after the child ended
    reader.join(STACK_SECONDS)
    return proc.returncode, list(tail)


def run_for_json(
    argv: Sequence[str], payload: Any, what: str, limit: float, **kw: Any
) -> tuple[dict, int, list[str]]:
    """:func:`run_watched` for a child that reads JSON and writes JSON to files, never to
    its standard output (``python -m parity.own.card``): ``argv`` gets three arguments, the
    file holding ``payload`` as JSON, the file to write its result to and its progress
    file. ``kw``: :func:`run_watched`'s. Returns (its result, ``{}`` when it wrote none or
    not JSON; its exit status; its last lines of output). Raises :class:`UserCodeStuck`."""
    with tempfile.TemporaryDirectory(prefix="parity-user-code-") as tmp:
        given, result, progress = (Path(tmp, n) for n in ("in.json", "out.json", "progress"))
        given.write_text(json.dumps(payload), encoding="utf-8")
        status, output = run_watched(
            [*argv, str(given), str(result), str(progress)],
            what,
            limit,
            progress_file=progress,
            **kw,
        )
        try:
            out = json.loads(result.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            out = {}
    return (out if isinstance(out, dict) else {}), status, output


def ended(status: int, output: Sequence[str]) -> str:
    """``ended with exit status 5 without a result; its last output: …``: for a child that
    wrote no result, its status (``killed by signal 9`` for a negative one) and its last
    non-blank line of output."""
    lines = [ln.strip() for ln in output if ln.strip()]
    how = f"killed by signal {-status}" if status < 0 else f"ended with exit status {status}"
    last = f"; its last output: {lines[-1]}" if lines else " and wrote nothing"
    return f"{how} without a result{last}"


def _size(path: str | os.PathLike | None) -> int:
    if path is None:
        return 0
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def _last_line(path: str | os.PathLike) -> str:
    """The last line of a progress file (what the child last said it does)."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.fstat(f.fileno()).st_size - 4096))
            lines = f.read().decode("utf-8", errors="replace").splitlines()
    except OSError:
        return ""
    return lines[-1].strip() if lines else ""


def _stop(proc: subprocess.Popen, reader: threading.Thread, state: dict, folder) -> str:
    """Ask a stuck ``proc`` for its Python stack (SIGUSR1), kill its process group, and
    return where the stack says it was (:func:`where_in_dump`)."""
    state["dump"] = []
    stack_signal = getattr(signal, "SIGUSR1", None)
    if stack_signal is not None:
        with contextlib.suppress(OSError):
            os.kill(proc.pid, stack_signal)
        reader.join(STACK_SECONDS)
    with contextlib.suppress(OSError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    reader.join(STACK_SECONDS)
    return where_in_dump(list(state["dump"]), folder)
