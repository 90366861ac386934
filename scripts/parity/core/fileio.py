"""Small file helpers: atomic writes of files and folders (with the mode the umask gives),
hashing, a lock file, logging into a job's log file, and a job's start (its log and its CPU
priority)."""

from __future__ import annotations

import contextlib
import fcntl
import glob
import hashlib
import logging
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it onto ``path`` only on success.

    A job killed or failing mid-write leaves at most a ``.tmp-*`` file, never a truncated
    ``path`` that a rerun would trust. The rename is atomic on POSIX file systems. The file
    gets the mode a newly created file gets under this process's umask (0666 & ~umask, or
    0777 & ~umask when the body left it executable), not mkstemp's 0600.

    Raises whatever the body raises, after removing the temporary file.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # A job killed earlier (SIGKILL skips the cleanup below) left its temporary file;
    # Snakemake never runs two jobs for one output at once, so it is safe to remove.
    for stale in path.parent.glob(f".tmp-{glob.escape(path.name)}.*"):
        stale.unlink(missing_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".tmp-{path.name}.", dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        # mkstemp makes the file 0600 whatever the umask; give it the mode any new file
        # gets here (0666 & ~umask), so that colleagues sharing the folder can read it, and
        # keep the execute bits of a file the body made executable (a copied binary).
        executable = tmp_path.stat().st_mode & 0o111
        os.chmod(tmp_path, (0o777 if executable else 0o666) & ~current_umask())
        os.replace(tmp_path, path)
    except BaseException:
        tmp_path.unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary folder beside ``path``; on success it takes the place of ``path``
    (a folder, whose old contents go, or nothing), else it is removed.

    The folder's contents appear together: a reader sees the old folder or the new one,
    never a half-written one (two renames, each atomic on POSIX file systems, with the old
    folder moved aside between them). The folder gets the mode a new folder gets under
    this process's umask (0777 & ~umask), not mkdtemp's 0700. Raises whatever the body
    raises, after removing the temporary folder.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # What a job killed earlier left (SIGKILL skips the cleanup below).
    for prefix in (".tmp-", ".old-"):
        for stale in path.parent.glob(f"{prefix}{glob.escape(path.name)}.*"):
            shutil.rmtree(stale, ignore_errors=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{path.name}.", dir=path.parent))
    try:
        yield tmp
        os.chmod(tmp, 0o777 & ~current_umask())
        old = None
        if path.is_dir() and not path.is_symlink():
            old = Path(tempfile.mkdtemp(prefix=f".old-{path.name}.", dir=path.parent))
            os.replace(path, old)  # onto an empty folder
        elif path.exists() or path.is_symlink():
            path.unlink()
        os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


class Writeback:
    """Keeps a large file being written from piling up in the page cache: after each piece
    the writer appends, :meth:`advance` asks the kernel to write back everything but that
    last piece and to drop what is already written back (``posix_fadvise`` with
    ``POSIX_FADV_DONTNEED``, which starts writeback of dirty pages and drops clean ones).

    Why (measured, docs/performance.md "Recording overhead"): left to the kernel, a trace
    stays dirty in memory until the flusher writes it back, 30 s later, in the middle of
    whatever runs then; once more is dirty than the kernel's threshold (a tenth of the
    available memory by default), it throttles the process writing. The scale experiment
    recording all of 800 steps (a 6 GB trace) took 1.57 times the run recording nothing;
    written back as it is written, 1.18. The cost stays with the run that made it, and the
    same pages are reused instead of fresh memory (on a VM that hands freed memory back to
    its host, each fresh page costs a fault on the host).

    Advice only: where ``posix_fadvise`` is missing (macOS) or fails, nothing is done and
    nothing is raised. A file of one piece is never touched.
    """

    def __init__(self, path: str | os.PathLike):
        self._fd: int | None = None
        self._last_end = 0  # the file's size after the piece before the last
        if hasattr(os, "posix_fadvise"):
            with contextlib.suppress(OSError):
                self._fd = os.open(path, os.O_RDONLY)

    def advance(self) -> None:
        """Call after each piece is written (the file's new size is read from it)."""
        if self._fd is None:
            return
        try:
            end = os.fstat(self._fd).st_size
            if self._last_end:
                os.posix_fadvise(self._fd, 0, self._last_end, os.POSIX_FADV_DONTNEED)
            self._last_end = end
        except OSError:
            self.close()

    def close(self) -> None:
        """Release the descriptor (idempotent)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)


def current_umask() -> int:
    """This process's umask, read without changing it where Linux reports it
    (``/proc/self/status``), else by setting and restoring it."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically (see :func:`atomic_path`)."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def sha256_file(path: str | os.PathLike) -> str:
    """Hex SHA-256 of a file's bytes. Raises ``FileNotFoundError`` if it is missing."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


class LockHeld(RuntimeError):
    """Another process holds the lock and did not let go in time."""


@contextlib.contextmanager
def exclusive_lock(path: str | os.PathLike, timeout: float = 0.0) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` (created if missing) for the block.

    Waits up to ``timeout`` seconds for another holder, then raises :class:`LockHeld`
    naming the path. The lock goes with the process, so a killed holder never leaves it
    stuck. Two Snakemake runs on different targets in one folder may both end in
    ``onerror``: whatever both may rewrite is written under this lock.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + timeout
    with open(path, "a+b") as f:
        while True:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise LockHeld(f"{path} is held by another run") from None
                time.sleep(0.1)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def job_logger(log_path: str | os.PathLike | None, name: str = "parity") -> logging.Logger:
    """Send this process's log records and stderr to ``log_path`` (a Snakemake ``log:``).

    With ``None`` the records go to stderr. Returns the logger to use.
    """
    logger = logging.getLogger(name)
    logger.setLevel(logging.INFO)
    logger.handlers.clear()
    if log_path is not None:
        Path(log_path).parent.mkdir(parents=True, exist_ok=True)
        stream = open(log_path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115
        sys.stderr = stream
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    logger.addHandler(handler)
    return logger


#: The ``nice`` increment of a job that does not declare resource ``nice``: every job but
#: the runner builds and the jobs the first comparison waits for (rules/common.smk
#: ``background_nice``). Linux's scheduler weighs nice 10 at about a tenth of nice 0, so
#: while a cargo build runs it gets the cores first, and a job at nice 10 still takes a
#: core the build leaves idle.
BACKGROUND_NICE = 10


def job_start(sm) -> logging.Logger:
    """Start a Snakemake ``script:`` job: lower this process's CPU priority by the job's
    resource ``nice`` (``BACKGROUND_NICE`` when the rule declares none; 0 leaves it; child
    processes such as a Rust runner inherit it), then :func:`job_logger` into its ``log:``,
    and take the config's ``limits.user_code_idle_seconds`` for the Rust runners the job
    starts (:func:`parity.core.watchdog.configure`).

    ``sm`` is the job's ``snakemake`` object. Returns the logger to use. Raises ValueError
    for a negative ``nice`` (raising priority needs privileges a job does not have).
    """
    nice = int(sm.resources.get("nice", BACKGROUND_NICE))
    if nice < 0:
        raise ValueError(f"resource nice={nice}: a job can only lower its CPU priority")
    if nice:
        os.nice(nice)
    from parity.core import watchdog

    watchdog.configure(getattr(sm, "config", None))
    return job_logger(sm.log[0])
