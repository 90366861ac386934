"""A watchdog over a child process that runs the user's own code (a Rust port's
``inspect``, its training, a replay; the op probes' runner too). While the workflow waits
on it, a line every :data:`PROGRESS_SECONDS` without output says what it waits on (the
experiment, the binary, the pid) and for how long; a child that makes no progress for
``limits.user_code_idle_seconds`` (config; :func:`configure`) is stopped, with a one-line
message naming it and the setting to raise.

Progress is output: bytes on the child's standard output (the frame stream or ``inspect``'s
JSON, read through :meth:`Watch.reader`), or bytes added to its standard error's file (the
job's log: a runner writes a progress line there at least every ten seconds while its steps
complete (parity-common's `progress`), and a port's prints go there
too). The watchdog's own lines are not progress. A forward pass that loops forever writes
nothing and is stopped; a step that takes longer than the setting needs the setting raised.

The Python counterpart, for a model file's code, is :mod:`parity.core.usercode`. Pure Python;
one thread per watched child.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from typing import IO, Any, Self

#: Seconds between the progress lines written while a child runs.
PROGRESS_SECONDS = 30.0
#: Seconds a stopped child has to end after SIGTERM before it gets SIGKILL.
GRACE_SECONDS = 5.0
#: The config key of the idle limit, as messages name it.
SETTING = "limits.user_code_idle_seconds"

#: Its default (``parity.plan.limits.DEFAULTS`` takes it from here).
IDLE_SECONDS = 600

_idle: float = float(IDLE_SECONDS)


def configure(config: Mapping[str, Any] | None) -> float:
    """Take the idle limit for this process's watched children from ``config`` (the
    workflow's config: ``limits.user_code_idle_seconds``, its default when unset). Every
    job calls it at its start (``parity.core.fileio.job_start``). Returns the limit in
    seconds."""
    global _idle
    given = ((config or {}).get("limits") or {}).get("user_code_idle_seconds")
    ok = isinstance(given, int | float) and not isinstance(given, bool) and given > 0
    _idle = float(given) if ok else float(IDLE_SECONDS)
    return _idle


def idle_seconds() -> float:
    """The idle limit in seconds (:func:`configure`; 600 unless configured)."""
    return _idle


def _seconds(s: float) -> str:
    return f"{s:.0f} s" if s >= 10 else f"{s:.2g} s"


def _stamp() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S")


class _Counting:
    """A binary stream that tells its :class:`Watch` how many bytes it has read. Reads
    return what has arrived (``readinto1``), so a large frame counts as it comes."""

    def __init__(self, raw: IO[bytes], watch: Watch):
        self._raw, self._watch = raw, watch

    def readinto(self, buf) -> int:
        read = getattr(self._raw, "readinto1", None) or self._raw.readinto
        n = read(buf) or 0
        self._watch.saw(n)
        return n

    def read1(self, size: int = -1) -> bytes:
        data = self._raw.read1(size) if hasattr(self._raw, "read1") else self._raw.read(size)
        self._watch.saw(len(data))
        return data

    def fileno(self) -> int:
        return self._raw.fileno()


class Watch:
    """Watches ``proc``, which runs ``what`` (``"mine: the candle port's inspect"``) with
    ``binary``: a context manager whose thread writes a line to standard error (the job's
    log) every ``progress`` seconds (default :data:`PROGRESS_SECONDS`) without output, and
    stops ``proc`` (SIGTERM, SIGKILL after :data:`GRACE_SECONDS`) after ``idle`` seconds
    (default :func:`idle_seconds`) without progress. ``stderr`` is the file the child's
    standard error goes to (its growth is progress), or None. After a stop,
    :attr:`stopped` holds the one-line message to raise; None otherwise. Read the child's
    standard output through :meth:`reader`."""

    def __init__(
        self,
        proc: subprocess.Popen,
        what: str,
        binary: str,
        stderr: IO | None = None,
        idle: float | None = None,
        progress: float | None = None,
    ):
        self.proc, self.what, self.binary = proc, what, binary
        self.idle = idle_seconds() if idle is None else float(idle)
        self.progress = PROGRESS_SECONDS if progress is None else float(progress)
        self.stopped: str | None = None
        self._stderr = stderr
        self._bytes = 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="user-code-watch")

    def reader(self, stream: IO[bytes]) -> _Counting:
        """``stream`` (the child's standard output), counted as progress as it is read."""
        return _Counting(stream, self)

    def saw(self, n: int) -> None:
        """Count ``n`` bytes of output as progress."""
        self._bytes += n

    def _err_size(self) -> int:
        if self._stderr is None:
            return 0
        try:
            return os.fstat(self._stderr.fileno()).st_size
        except (OSError, ValueError):
            return 0

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._done.set()
        self._thread.join()

    def _run(self) -> None:
        start = last = time.monotonic()
        seen, lines = (self._bytes, self._err_size()), 0
        tick = max(0.05, min(1.0, self.idle / 10, self.progress / 2))
        while not self._done.wait(tick):
            if self.proc.poll() is not None:
                return
            now = time.monotonic()
            got = (self._bytes, self._err_size())
            if got != seen:
                seen, last, lines = got, now, 0
            if now - last >= self.idle:
                self._stop(now - last)
                return
            if now - last >= (lines + 1) * self.progress:
                lines += 1
                print(
                    f"{_stamp()} INFO waiting on {self.what} ({self.binary}, pid "
                    f"{self.proc.pid}): no output for {_seconds(now - last)}, running for "
                    f"{_seconds(now - start)}; {SETTING} is {self.idle:g}",
                    file=sys.stderr,
                    flush=True,
                )
                # the line just written to the log is no progress of the child's
                seen = (self._bytes, self._err_size())

    def _stop(self, quiet: float) -> None:
        pid = self.proc.pid
        self.stopped = (
            f"{self.what} ({self.binary}, pid {pid}) made no progress for {_seconds(quiet)} (no "
            f"output, no recorded step) and was stopped; if it is only slow, raise {SETTING} "
            f"(now {self.idle:g})"
        )
        print(f"{_stamp()} ERROR {self.stopped}", file=sys.stderr, flush=True)
        with contextlib.suppress(OSError):
            self.proc.terminate()
        try:
            self.proc.wait(GRACE_SECONDS)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(OSError):
                self.proc.kill()


def run_captured(
    cmd: Sequence[str],
    what: str,
    env: Mapping[str, str] | None = None,
    stderr: IO | None = None,
    idle: float | None = None,
) -> tuple[int, bytes, str | None]:
    """Run ``cmd`` (``cmd[0]`` is the binary), its standard output captured and its standard
    error to ``stderr`` (a file, or inherited), under a :class:`Watch` for ``what``.
    Returns (exit status, standard output, the stop message or None). A negative status is
    the signal that ended it, as ``subprocess`` reports it."""
    proc = subprocess.Popen(list(cmd), stdout=subprocess.PIPE, stderr=stderr, env=env)
    chunks: list[bytes] = []
    try:
        with Watch(proc, what, cmd[0], stderr, idle) as watch:
            out = watch.reader(proc.stdout)
            while chunk := out.read1(1 << 20):
                chunks.append(chunk)
            proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
    return proc.returncode, b"".join(chunks), watch.stopped
