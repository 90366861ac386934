"""Warm start: a job's work done in a fork of an interpreter that has already imported the
job's heavy libraries; and the allocator setting (:data:`MALLOC_TUNABLES`) its server, and
so every fork, starts with, which the Rust runners start with too (``parity.train.rust``).

Every PyTorch job used to pay for ``import torch`` and for the ``torch._dynamo`` import that
constructing any torch optimizer triggers (torch/_compile.py ``_disable_dynamo``): about 4 s
of CPU in a job whose training takes a few hundredths of a second on the study's small
models (docs/performance.md, "Warm start"), and the comparison and localisation jobs paid
for numpy, pyarrow and matplotlib. :func:`run_job` runs a job's entry function in a child
forked from a *server* that imported them once.

How (Linux only):

- The server is named by a hash of everything a forked child inherits that a fresh process
  could have differently: the interpreter and ``sys.path``, the environment (Snakemake sets
  ``OMP_NUM_THREADS`` and its kin per job), the CPU priority, the preloaded distributions'
  versions and this file's bytes. Its socket is an abstract Unix socket (no file to leave
  behind), and it serves only processes of its own user (``SO_PEERCRED``).
- The first job that finds no server starts one (a detached process in its own session).
  It binds the name before it imports anything, so two jobs starting at once start one
  server between them, and it exits after :data:`IDLE_SECONDS` without a job.
- For each job the server forks a child. The child takes the job's standard streams
  (passed as file descriptors), working directory, umask, environment, ``sys.path`` and
  ``argv``, calls the entry function with the job's ``snakemake`` object and exits. The
  job's own process waits, forwards SIGTERM, SIGINT, SIGHUP and SIGQUIT to the child, and
  exits with the child's status; a child whose job process has gone (killed, even with
  SIGKILL) terminates itself.
- The server never imports this project's modules other than this one, and never runs a
  torch operation: the child imports the project's code fresh from disk, and torch's thread
  pools and CUDA are first set up in the child, as in a fresh process. It forks only while
  single-threaded and allocates as the Rust runners do (:data:`MALLOC_TUNABLES`).

Anywhere else (another OS, a Slurm job, ``warm_start: false``, a server that cannot
be started or dies before it answers) the entry function runs in the job's own process, as
it always did. Either way the same code runs on the same libraries: the traces are
bit-identical (tests/test_warm.py checks both ways on real runs).

One thing differs: Snakemake's ``benchmark:`` file measures the job's own process, which
with a warm start only waits, so the child's CPU time and peak memory go to the job's log.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.metadata
import importlib.util
import json
import os
import pickle
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path

#: What a server imports before it forks: one set for every warm-started job (torch's
#: pages are shared with the children that never touch it). torch._dynamo: see the module
#: docstring; matplotlib (not pyplot, whose backend a job chooses); snakemake.script: to
#: unpickle the job's ``snakemake`` object.
PRELOAD = ("torch", "torch._dynamo", "numpy", "pyarrow", "pyarrow.parquet", "matplotlib")
PRELOAD += ("snakemake.script",)
#: Distributions whose versions are part of a server's name (an upgrade gets a new server).
DISTRIBUTIONS = ("torch", "numpy", "pyarrow", "matplotlib", "snakemake")
#: Seconds a server waits for the next job before it exits.
IDLE_SECONDS = 30.0
#: Seconds a job waits for a server it found or started to take its request (the server
#: imports torch first: a few seconds, more on a loaded machine) before it runs here.
ANSWER_SECONDS = 120.0
#: Signals a waiting job passes on to its child.
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)
#: glibc's allocator setting for the processes that train: the Rust runners
#: (``parity.train.rust``) and the server the PyTorch jobs are forked from. Blocks up to
#: 32 MiB come from the heap, and freed memory stays in the process. By default glibc serves
#: every block over 128 KiB with its own mmap and returns it with munmap, so each training
#: step faulted its tensors' pages in afresh: the scale MLP's candle run (200 steps, record
#: nothing) spent 10.2 s of system time beside 7.4 s of user time, and 0.08 s with these, at
#: the same peak memory; its PyTorch run took 2.73 s against 3.23 s (docs/performance.md,
#: "Recording overhead"). Where a block lives changes no number. A ``GLIBC_TUNABLES`` in the
#: environment wins over it.
MALLOC_TUNABLES = "glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=4294967295"

_HEADER = struct.Struct("!Q")


class Unavailable(Exception):
    """No server could take the job (the job then runs in its own process)."""


def enabled(sm) -> str | None:
    """Why the job of ``sm`` (its ``snakemake`` object) runs in its own process, or None
    when it may use a warm start."""
    if sys.platform != "linux":
        return f"warm start needs Linux, not {sys.platform}"
    if os.environ.get("SLURM_JOB_ID"):
        return "a Slurm job: a server would outlive its allocation"
    if not sm.config.get("warm_start", True):
        return "warm_start is false"
    return None


#: Environment variables that differ between Snakemake invocations and that no preloaded
#: library reads (the child gets the job's own value): not part of a server's name.
#: ``PARITY_RUN_ID`` is parity.core.integrity.RUN_ID_ENV (the server imports nothing of ours).
VOLATILE_ENV = frozenset({"PARITY_RUN_ID"})


def server_name(preload: Sequence[str]) -> str:
    """The abstract socket name of the server for ``preload`` in this process's
    circumstances (see the module docstring); a leading NUL byte makes it abstract.

    The preloaded packages are named by the files they resolve to here (not by
    ``sys.path``, which holds a folder of Snakemake's that differs per invocation)."""
    packages = sorted({m.partition(".")[0] for m in preload})
    origins = [getattr(importlib.util.find_spec(p), "origin", None) for p in packages]
    versions = []
    for dist in DISTRIBUTIONS:
        try:
            versions.append(importlib.metadata.version(dist))
        except importlib.metadata.PackageNotFoundError:
            versions.append(None)
    key = repr(
        (
            sys.executable,
            sys.version,
            sorted((k, v) for k, v in os.environ.items() if k not in VOLATILE_ENV),
            os.getpriority(os.PRIO_PROCESS, 0),
            list(preload),
            origins,
            versions,
            hashlib.sha256(Path(__file__).read_bytes()).hexdigest(),
        )
    )
    digest = hashlib.sha256(key.encode()).hexdigest()[:24]
    return f"\0parity-warm-{os.getuid()}-{digest}"


def run_job(sm, entry: Callable, preload: Sequence[str] = PRELOAD) -> None:
    """Run ``entry(sm)`` for the Snakemake ``script:`` job whose ``snakemake`` object is
    ``sm``: in a child of a warm server when :func:`enabled`, else (or when the server is
    :class:`Unavailable`) here. ``entry`` must be a module-level function (the child imports
    it by name). Returns when it succeeded; raises SystemExit with the child's exit status
    (128 + the signal's number when a signal ended it) when it failed; an exception of
    ``entry`` run here propagates."""
    reason = enabled(sm)
    if reason is None:
        try:
            status = _run_warm(sm, f"{entry.__module__}:{entry.__qualname__}", preload)
        except Unavailable as e:
            print(f"warm start: not used ({e}); running in this process", file=sys.stderr)
        else:
            if status:
                raise SystemExit(status)
            return
    entry(sm)


def _run_warm(sm, entry: str, preload: Sequence[str]) -> int:
    name = server_name(preload)
    sock = _connect(name, preload)
    # Pickle, as Snakemake hands the job its ``snakemake`` object; read only by a server
    # of this user (checked on both ends with SO_PEERCRED), never from a file.
    payload = pickle.dumps(
        {
            "entry": entry,
            "sm": sm,
            "cwd": os.getcwd(),
            "umask": _umask(),
            "env": dict(os.environ),
            "path": list(sys.path),
            "argv": list(sys.argv),
            "ignored": [int(s) for s in FORWARDED if signal.getsignal(s) == signal.SIG_IGN],
        }
    )
    try:
        socket.send_fds(sock, [_HEADER.pack(len(payload))], [0, 1, 2])
        sock.sendall(payload)
        sock.settimeout(ANSWER_SECONDS)
        first = _receive(sock)
    except (OSError, EOFError) as e:
        sock.close()
        raise Unavailable(f"the server did not take the job ({e})") from e
    child = first["pid"]
    previous = {
        s: signal.signal(s, lambda signum, _f: _forward(child, signum))
        for s in FORWARDED
        if signal.getsignal(s) != signal.SIG_IGN  # ignored here: ignored by the child too
    }
    try:
        sock.settimeout(None)
        try:
            done = _receive(sock)
        except (OSError, EOFError):
            print(
                f"warm start: the server ended without the status of job process {child}",
                file=sys.stderr,
            )
            return 1
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        sock.close()
    _log_usage(sm, child, done)
    code = os.waitstatus_to_exitcode(done["status"])
    return 128 - code if code < 0 else code


def _forward(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signum)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _log_usage(sm, child: int, done: dict) -> None:
    """Append the child's CPU time and peak memory to the job's log (its benchmark file
    measures this waiting process only)."""
    line = (
        f"warm start: the job ran as process {child}, forked from a server that had "
        f"imported its libraries; it used {done['cpu']:.2f} s of CPU, peak RSS "
        f"{done['maxrss_kb'] / 1024:.1f} MiB (the benchmark file measures the waiting "
        "process only)"
    )
    if sm.log:
        with open(sm.log[0], "a", encoding="utf-8") as f:
            f.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} INFO {line}\n")


def _connect(name: str, preload: Sequence[str]) -> socket.socket:
    """A connection to the server ``name``, started here if none answers."""
    sock = _try_connect(name)
    if sock is not None:
        return sock
    # The server runs this file alone (-P) with this process's sys.path and imports none of
    # our modules (a child imports its job's); it starts with the allocator setting.
    argv = [sys.executable, "-P", __file__, name[1:], str(IDLE_SECONDS), json.dumps(sys.path)]
    server = subprocess.Popen(
        [*argv, *preload],
        env={"GLIBC_TUNABLES": MALLOC_TUNABLES, **os.environ},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        close_fds=True,
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        sock = _try_connect(name)
        if sock is not None:
            return sock
        if server.poll():  # (0: another job's server holds the name; connect to that)
            raise Unavailable(f"the server it started ended with status {server.returncode}")
        time.sleep(0.02)
    raise Unavailable("no server answered within 10 s of starting one")


def _try_connect(name: str) -> socket.socket | None:
    """A connection to the server ``name``, None when nobody listens there. Raises
    :class:`Unavailable` when a process of another user holds the name (anyone may bind
    an abstract name first): nothing of the job, its environment or its streams is sent
    to it."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(name)
    except (ConnectionRefusedError, FileNotFoundError):
        sock.close()
        return None
    uid = _peer_uid(sock)
    if uid != os.getuid():
        sock.close()
        raise Unavailable(f"the server's name is held by a process of user id {uid}")
    return sock


def _send(sock: socket.socket, message: dict) -> None:
    """A server's answer: JSON (numbers only), never pickle, so a client that reached a
    stranger's server could not be made to run code by reading it."""
    data = json.dumps(message).encode()
    sock.sendall(_HEADER.pack(len(data)) + data)


def _receive(sock: socket.socket) -> dict:
    (size,) = _HEADER.unpack(_exactly(sock, _HEADER.size))
    return json.loads(_exactly(sock, size))


def _peer_uid(sock: socket.socket) -> int:
    """The user id of the process at the other end of a Unix socket (SO_PEERCRED)."""
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", creds)[1]


def _exactly(sock: socket.socket, size: int) -> bytes:
    chunks, left = [], size
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            raise EOFError("connection closed")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


#: Native threads the preloaded libraries start that are safe to fork beside: pyarrow's
#: jemalloc purges pages in the background, and jemalloc takes its own locks around a fork
#: (pthread_atfork). (OpenBLAS starts worker threads too, unless OPENBLAS_NUM_THREADS is 1,
#: as Snakemake sets it for a one-thread job; they cannot be told apart by name, so a
#: server that finds them does not fork.)
FORK_SAFE_THREADS = frozenset({"jemalloc_bg_thd"})


def _unsafe_threads() -> list[str]:
    """The names of this process's threads, other than the calling one, that forking
    beside could leave a lock held in the child (Python threads and unknown native ones)."""
    found = [t.name for t in threading.enumerate() if t is not threading.current_thread()]
    me = str(threading.get_native_id())
    for tid in os.listdir("/proc/self/task"):
        if tid == me:
            continue
        try:
            with open(f"/proc/self/task/{tid}/comm", encoding="utf-8") as f:
                name = f.read().strip()
        except FileNotFoundError:  # the thread ended since the folder was listed
            continue
        if name not in FORK_SAFE_THREADS:
            found.append(name)
    return found


def serve(name: str, idle: float, path: Sequence[str], preload: Sequence[str]) -> int:
    """The server: bind ``name`` (an abstract socket name without its NUL; exit quietly
    if another server holds it), import ``preload`` with ``path`` as ``sys.path``, then
    fork a child per job until ``idle`` seconds pass without one. Returns the exit
    status."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind("\0" + name)
    except OSError:
        return 0  # another job's server won the race: its clients use it
    listener.listen(64)
    sys.path[:] = path
    for module in preload:
        importlib.import_module(module)
    if _unsafe_threads():
        return 1  # forking now could copy a lock mid-use; the clients fall back
    children: dict[int, socket.socket] = {}
    last = time.monotonic()
    while children or time.monotonic() - last < idle:
        ready, _, _ = select.select([listener], [], [], 0.05)
        if ready:
            _accept(listener, children)
            last = time.monotonic()
        while children:
            try:
                pid, status, usage = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            conn = children.pop(pid)
            try:
                cpu = usage.ru_utime + usage.ru_stime
                _send(conn, {"status": status, "cpu": cpu, "maxrss_kb": usage.ru_maxrss})
            except OSError:
                pass  # the job's process is gone; nobody waits for this status
            conn.close()
            last = time.monotonic()
    return 0


def _hung_up(conn: socket.socket) -> bool:
    """Whether the client has closed its end of ``conn``: after its request it sends
    nothing more, so a connection that reads as ended (or fails) has no job waiting."""
    if not select.select([conn], [], [], 0)[0]:
        return False  # open, nothing to read: the job's process waits for its answer
    try:
        return conn.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True


def _accept(listener: socket.socket, children: dict[int, socket.socket]) -> None:
    conn, _ = listener.accept()
    fds: list[int] = []
    try:
        if _peer_uid(conn) != os.getuid():  # read nothing of another user's
            conn.close()
            return
        conn.settimeout(10)
        header, fds, _, _ = socket.recv_fds(conn, _HEADER.size, 3)
        if len(header) != _HEADER.size or len(fds) != 3:
            raise EOFError("incomplete request")
        payload = _exactly(conn, _HEADER.unpack(header)[0])
        if _hung_up(conn):
            # The job's process gave up waiting (ANSWER_SECONDS) and runs the job itself:
            # its request was still queued here. A child would run the job a second time.
            raise EOFError("the job's process is gone")
    except (OSError, EOFError):
        for fd in fds:
            os.close(fd)
        conn.close()
        return
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            listener.close()
            for other in children.values():
                other.close()
            code = _child(conn, fds, payload)
        finally:
            os._exit(code)
    for fd in fds:
        os.close(fd)
    children[pid] = conn
    try:
        conn.settimeout(None)
        _send(conn, {"pid": pid})
    except OSError:
        pass  # the child's watchdog ends it: its job's process is gone


def _child(conn: socket.socket, fds: list[int], payload: bytes) -> int:
    """In the forked child: become the job, run its entry function, return its status."""
    for target, fd in zip((0, 1, 2), fds, strict=True):
        os.dup2(fd, target)
        os.close(fd)
    conn.settimeout(None)
    _signals_as_in_a_fresh_interpreter(payload)
    threading.Thread(target=_watch, args=(conn,), daemon=True, name="warm-watchdog").start()
    try:
        request = pickle.loads(payload)
        os.chdir(request["cwd"])
        os.umask(request["umask"])
        os.environ.clear()
        os.environ.update(request["env"])
        sys.path[:] = request["path"]
        sys.argv[:] = request["argv"]
        module, _, function = request["entry"].partition(":")
        getattr(importlib.import_module(module), function)(request["sm"])
        return 0
    except SystemExit as e:
        if e.code is None or isinstance(e.code, int):
            return e.code or 0
        print(e.code, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        # As a fresh interpreter ends on an unhandled SIGINT: by the signal.
        traceback.print_exc()
        _flush()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
        return 1
    except BaseException:
        traceback.print_exc()
        return 1
    finally:
        _flush()


def _flush() -> None:
    """Flush the job's log handlers and standard streams before the child's os._exit."""
    import logging

    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()


#: Seconds a child whose job process has gone has to end after SIGTERM, before SIGKILL.
GRACE_SECONDS = 10.0


def _signals_as_in_a_fresh_interpreter(payload: bytes) -> None:
    """Set the forwarded signals' handling as the job's own interpreter started with it:
    ignored where the job's process inherited them ignored (``nohup``, a test runner),
    else Python's defaults (KeyboardInterrupt for SIGINT). The server's own came from
    whichever job started it."""
    ignored = set(pickle.loads(payload).get("ignored", ()))
    for s in FORWARDED:
        if int(s) in ignored:
            signal.signal(s, signal.SIG_IGN)
        else:
            signal.signal(s, signal.default_int_handler if s == signal.SIGINT else signal.SIG_DFL)


def _watch(conn: socket.socket) -> None:
    """Once the job's process has closed the connection (it is gone: nobody waits for this
    child's status), send this child SIGTERM, as Snakemake would, and SIGKILL after
    :data:`GRACE_SECONDS` if it is still running."""
    with contextlib.suppress(OSError):
        while conn.recv(1):
            pass
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(GRACE_SECONDS)
    os.kill(os.getpid(), signal.SIGKILL)


if __name__ == "__main__":
    sys.exit(serve(sys.argv[1], float(sys.argv[2]), json.loads(sys.argv[3]), sys.argv[4:]))
