"""Calls into the user's own Python code, watched: a model file that hangs, or prints.

A user's model file runs in three places: the model card's subprocess while the DAG is
built (:mod:`parity.own.card`, run by :func:`parity.core.userproc.run_watched`), and
in-process in the fixture, training and localisation jobs (:class:`Watchdog`). Either way
the call is stopped when it makes no progress for config ``limits.user_code_idle_seconds``
(default 600 s, :data:`parity.plan.limits.DEFAULTS`), with one line that names the
experiment, the factory, the process id and where its Python stack was; until then a
progress line every :data:`PROGRESS_SECONDS` says what the workflow is waiting on.

*Progress* is :func:`progress`: the training loop and the replay call it at each step,
:mod:`parity.own.torch_model` before it imports a factory and before it calls one (in the
card's subprocess it reaches the plan through a file, :func:`report_to`); and a line of
the subprocess's output. A step that takes longer than the setting without hanging needs
the setting raised; the message says which key.

Whatever the user's code writes to standard output is never parsed: the card's
subprocess writes its card to a file and its output (prints at import included) is relayed
to this process's standard error, each line prefixed.

Standard library only: the plan imports this while the DAG is built.
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Self, TextIO

#: The config key of the limit, as messages name it.
KEY = "limits.user_code_idle_seconds"
#: Seconds between two progress lines while user code goes without progress.
PROGRESS_SECONDS = 30.0
#: Seconds between two looks of a watchdog at the clock.
POLL_SECONDS = 0.25
#: Seconds beyond the limit after which faulthandler's own timer (which needs no GIL)
#: dumps the stack and exits, for code that holds the GIL and so stops the watchdog too.
GRACE_SECONDS = 30.0
#: Exit status of a process a :class:`Watchdog` stopped.
EXIT_STUCK = 3
#: Seconds a stopped thread has to unwind (its temporary files removed on the way) before
#: the process exits without it.
UNWIND_SECONDS = 10.0


class UserCodeStuck(RuntimeError):  # raised by parity.core.userproc
    """User code that made no progress for the limit; the message is one line naming
    what was called, the process id, the limit's key and where the code was."""


class _Stopped(BaseException):
    """Raised in the watched main thread by its :class:`Watchdog`'s signal: it unwinds the
    user's code (``finally`` blocks run, temporary files go) past every ``except
    Exception``."""


def factory_label(spec: Mapping[str, Any], workdir: str | os.PathLike = ".") -> str:
    """What a model spec (config ``model.torch``) calls, for a message: ``the model factory
    /abs/model.py`` (a file, relative to ``workdir``), ``the model factory pkg.mod:make`` (a
    module) or ``the transformers class LlamaForCausalLM``."""
    if "transformers" in spec:
        return f"the transformers class {spec['transformers']}"
    ref = str(spec.get("factory", ""))
    target = ref.rpartition(":")[0]
    if target.endswith(".py") or "/" in target:
        return f"the model factory {os.path.realpath(Path(workdir) / target)}"
    return f"the model factory {ref}"


def factory_folder(spec: Mapping[str, Any], workdir: str | os.PathLike = ".") -> Path | None:
    """The folder of a spec's factory file (where the frames worth naming are), or None."""
    target = str(spec.get("factory", "")).rpartition(":")[0]
    if "transformers" not in spec and (target.endswith(".py") or "/" in target):
        return Path(os.path.realpath(Path(workdir) / target)).parent
    return None


def _seconds(s: float) -> str:
    return f"{s:.0f} s" if s >= 1 else f"{s:.2g} s"


def where_in(frames: Sequence[traceback.FrameSummary], folder: Path | None) -> str:
    """``/x/model.py:7 in forward``: the innermost of ``frames`` (outermost first) in
    ``folder`` (the user's files), else the innermost of a file (not ``<frozen …>``);
    empty for no frames."""
    real = [f for f in frames if not f.filename.startswith("<")]
    if not real:
        return ""
    pick = real[-1]
    if folder is not None:
        for f in reversed(frames):
            with contextlib.suppress(ValueError, OSError):
                path = Path(f.filename)
                if path.is_file() and Path(os.path.realpath(path)).is_relative_to(folder):
                    pick = f
                    break
    return f"{pick.filename}:{pick.lineno} in {pick.name}"


class Watchdog:
    """Watches the thread that enters it for progress (:meth:`progress`, or the module's
    :func:`progress`): while none comes it writes a line to ``stream`` every
    :data:`PROGRESS_SECONDS` (``waiting on <what> (pid N), in <doing>, for 30 s;
    limits.user_code_idle_seconds is 600``); after ``idle_seconds`` without any it writes
    the Python stack of every thread (faulthandler) and one line naming ``what``, the pid,
    what it was doing and where, to ``stream`` and to the process's original standard
    error, then calls ``on_stuck(message)``. Without ``on_stuck`` it stops the code: a
    watched main thread gets an exception (by SIGUSR2) that unwinds it past every ``except
    Exception``, and leaving the block then raises ``SystemExit(EXIT_STUCK)``; code stuck
    where no exception reaches (another thread, C code) gets ``os._exit(EXIT_STUCK)`` after
    :data:`UNWIND_SECONDS`. ``folder``: the user's files, for where.

    Use as a context manager; watchdogs nest (:func:`progress` reaches the innermost).
    """

    def __init__(
        self,
        what: str,
        idle_seconds: float,
        *,
        folder: Path | None = None,
        stream: TextIO | None = None,
        on_stuck: Callable[[str], None] | None = None,
    ):
        self.what = what
        self.idle_seconds = float(idle_seconds)
        self.folder = folder
        self.stream = stream
        self.on_stuck = on_stuck
        self.doing = "starting"
        self.last = time.monotonic()
        #: The message, once it stopped the code.
        self.stopped: str | None = None
        self._stop = threading.Event()
        self._left = threading.Event()
        self._lock = threading.Lock()
        self._leaving = False
        self._thread: threading.Thread | None = None
        self._watched: int | None = None
        self._armed: float | None = None
        self._signal: tuple[int, Any] | None = None

    def progress(self, doing: str) -> None:
        """Progress: the watched code is now ``doing`` (``step 3 of 100``)."""
        self.doing = doing
        self.last = time.monotonic()

    def __enter__(self) -> Self:
        self._watched = threading.get_ident()
        self.last = time.monotonic()
        main = threading.current_thread() is threading.main_thread()
        if main and self.on_stuck is None and hasattr(signal, "SIGUSR2"):
            self._signal = (signal.SIGUSR2, signal.signal(signal.SIGUSR2, self._raise))
        _ACTIVE.append(self)
        self._thread = threading.Thread(target=self._run, name="user-code-watchdog", daemon=True)
        self._thread.start()
        return self

    def _raise(self, signum, frame) -> None:
        raise _Stopped(self.stopped)

    def __exit__(self, *exc) -> None:
        try:
            with self._lock:
                self._leaving = True
            self._left.set()
            self._stop.set()
            if self._thread is not None:
                self._thread.join()
        except _Stopped:  # the signal came as the block ended
            pass
        finally:
            self._left.set()
            if self._signal is not None:
                signal.signal(*self._signal)
            with contextlib.suppress(ValueError):
                _ACTIVE.remove(self)
            if self._armed is not None:
                faulthandler.cancel_dump_traceback_later()
        if self.stopped is not None and self.on_stuck is None:
            raise SystemExit(EXIT_STUCK) from None

    def _out(self) -> TextIO:
        return self.stream if self.stream is not None else sys.stderr

    def _write(self, text: str) -> None:
        with contextlib.suppress(Exception):
            out = self._out()
            out.write(text + "\n")
            out.flush()

    def _arm(self, last: float) -> None:
        """faulthandler's own timer, for code that holds the GIL (then this thread cannot
        run): dump and exit ``GRACE_SECONDS`` after the limit."""
        if self._armed == last:
            return
        with contextlib.suppress(Exception):
            out = self._out()
            out.fileno()
            remaining = self.idle_seconds - (time.monotonic() - last)
            faulthandler.dump_traceback_later(
                max(1.0, remaining + GRACE_SECONDS), exit=True, file=out
            )
            self._armed = last

    def _run(self) -> None:
        seen, lines = self.last, 0
        while not self._stop.wait(POLL_SECONDS):
            last = self.last
            if last != seen:
                seen, lines = last, 0
            self._arm(last)
            idle = time.monotonic() - last
            if idle >= self.idle_seconds:
                self._stuck(idle)
                return
            if idle >= (lines + 1) * PROGRESS_SECONDS:
                lines += 1
                self._write(
                    f"waiting on {self.what} (pid {os.getpid()}), in {self.doing}, for "
                    f"{_seconds(lines * PROGRESS_SECONDS)}; {KEY} is {self.idle_seconds:g}"
                )

    def _stuck(self, idle: float) -> None:
        with self._lock:
            if self._leaving:  # the block ended as it ran out of time
                return
            self.stopped = self._report(idle)
        if self.on_stuck is not None:
            self.on_stuck(self.stopped)
            return
        if self._signal is not None:
            with contextlib.suppress(OSError, ValueError):
                signal.pthread_kill(self._watched, self._signal[0])
        if self._signal is None or not self._left.wait(UNWIND_SECONDS):
            with contextlib.suppress(Exception):
                sys.stderr.flush()
            os._exit(EXIT_STUCK)

    def _report(self, idle: float) -> str:
        """Write the stack of every thread and the message (returned) to the log, and the
        message to the original standard error."""
        frame = sys._current_frames().get(self._watched)
        where = where_in(traceback.extract_stack(frame), self.folder) if frame else ""
        message = (
            f"{self.what} (pid {os.getpid()}) made no progress for {_seconds(idle)}, in "
            f"{self.doing}: stopped{f' at {where}' if where else ''}, its Python stack "
            f"written to the log ({KEY} is {self.idle_seconds:g}; raise it if the code needs "
            "longer)"
        )
        out = self._out()
        self._write(f"{self.what} made no progress; the Python stack of every thread:")
        try:
            out.flush()
            faulthandler.dump_traceback(file=out, all_threads=True)
        except Exception:  # a stream without a file descriptor: Python's own view
            for ident, f in sys._current_frames().items():
                self._write(f"Thread {ident:#x}:\n" + "".join(traceback.format_stack(f)))
        self._write(message)
        if sys.__stderr__ is not None and sys.__stderr__ is not out:
            with contextlib.suppress(Exception):
                sys.__stderr__.write(message + "\n")
                sys.__stderr__.flush()
        return message


#: The watchdogs entered, innermost last.
_ACTIVE: list[Watchdog] = []
#: Where this process reports its progress to a watching parent (:func:`report_to`).
_REPORT: list[TextIO] = []


def progress(doing: str) -> None:
    """Report progress to the innermost :class:`Watchdog`, if any, and to a watching parent
    (:func:`report_to`), if any (else nothing): the watched code is now ``doing``. Cheap: a
    clock read (and a line written, in a subprocess
    :func:`parity.core.userproc.run_watched` watches)."""
    if _ACTIVE:
        _ACTIVE[-1].progress(doing)
    if _REPORT:
        with contextlib.suppress(OSError, ValueError):
            _REPORT[0].write(" ".join(doing.split()) + "\n")
            _REPORT[0].flush()


def report_to(path: str | os.PathLike) -> None:
    """Send this process's :func:`progress` to ``path``, the progress file of the
    :func:`parity.core.userproc.run_watched` that started it, one line per call."""
    _REPORT[:] = [open(path, "a", encoding="utf-8")]  # noqa: SIM115 (the process's life)


@contextlib.contextmanager
def watching(
    experiment: str,
    spec: Mapping[str, Any],
    limit: float | None = None,
    stream: TextIO | None = None,
    doing: str = "starting",
) -> Iterator[Watchdog]:
    """A :class:`Watchdog` over the calls into the model of ``spec`` (config
    ``model.torch``) of ``experiment`` in this thread, stopping them after ``limit``
    seconds without progress (None: the job's ``limits.user_code_idle_seconds``, which
    ``parity.core.fileio.job_start`` takes from the config: ``parity.core.watchdog``)."""
    if limit is None:
        from parity.core import watchdog

        limit = watchdog.idle_seconds()
    what = f"{factory_label(spec)} of experiment {experiment}"
    with Watchdog(what, limit, folder=factory_folder(spec), stream=stream) as w:
        w.progress(doing)
        yield w
