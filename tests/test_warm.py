"""Warm start (parity.core.warm): a job's entry function run in a fork of a server that has
preloaded its libraries. The unit tests preload ``json`` (fast) and give each test its own
server (the environment is part of a server's name); the last test runs real PyTorch jobs
both ways and compares their traces bit for bit."""

import json
import os
import pickle
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

import warm_entries
from parity.core import warm
from parity.core.warm import MALLOC_TUNABLES
from parity.trace.reader import TraceReader

from conftest import REPO, load_test_config, run_workflow

PRELOAD = ("json",)


@pytest.fixture
def own_server(tmp_path, monkeypatch):
    """A server of this test's own (a unique variable in the environment names it), gone
    two seconds after its last job."""
    monkeypatch.setenv("WARM_TEST_MARKER", str(tmp_path))
    monkeypatch.setattr(warm, "IDLE_SECONDS", 2.0)
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    return tmp_path


def seen(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def gone(pid, within=15.0) -> bool:
    """Whether process ``pid`` has ended (or is a zombie) within ``within`` seconds."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
                if f.read().split(") ", 1)[1].startswith("Z"):
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.05)
    return False


def test_the_job_runs_in_a_child_of_the_server_with_the_jobs_settings(
    own_server, monkeypatch, capfd
):
    out = own_server / "seen.json"
    work = own_server / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setattr(sys, "argv", ["job-script", "--flag"])
    old = os.umask(0o027)
    try:
        warm.run_job(warm_entries.Job(out), warm_entries.report, PRELOAD)
    finally:
        os.umask(old)
    s = seen(out)
    assert s["pid"] != os.getpid() and s["ppid"] != os.getpid()  # forked by the server
    assert s["cwd"] == str(work)
    assert s["umask"] == 0o027
    assert s["marker"] == str(own_server)
    assert s["argv"] == ["job-script", "--flag"]
    assert s["path"] == sys.path
    captured = capfd.readouterr()
    assert "job says hello on stdout" in captured.out
    assert "job says hello on stderr" in captured.err
    assert "warm start: not used" not in captured.err


@pytest.mark.parametrize("users", [None, "glibc.malloc.check=0"])
def test_the_server_starts_with_the_runners_allocator_setting_unless_the_user_set_one(
    own_server, monkeypatch, users
):
    if users is None:
        monkeypatch.delenv("GLIBC_TUNABLES", raising=False)
    else:
        monkeypatch.setenv("GLIBC_TUNABLES", users)
    out = own_server / "seen.json"
    warm.run_job(warm_entries.Job(out), warm_entries.report, PRELOAD)
    s = seen(out)
    assert s["ppid"] != os.getpid()  # a warm child
    # what glibc leaves of the variable after reading it at start-up (2.36 keeps only the
    # first tunable in the process's copy): a fresh process started with the same value
    fresh = subprocess.run(
        [
            sys.executable,
            "-c",
            "import warm_entries; print(warm_entries._started_with('GLIBC_TUNABLES'))",
        ],
        env={**os.environ, "GLIBC_TUNABLES": users or MALLOC_TUNABLES},
        cwd=os.path.dirname(warm_entries.__file__),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert fresh != "None" and s["started_with"] == fresh


def test_the_next_job_is_served_by_the_same_server(own_server):
    first, second = own_server / "1.json", own_server / "2.json"
    warm.run_job(warm_entries.Job(first), warm_entries.report, PRELOAD)
    warm.run_job(warm_entries.Job(second), warm_entries.report, PRELOAD)
    assert seen(first)["ppid"] == seen(second)["ppid"]
    assert seen(first)["pid"] != seen(second)["pid"]


def test_the_childs_usage_is_written_to_the_jobs_log(own_server):
    log = own_server / "job.log"
    warm.run_job(warm_entries.Job(own_server / "s.json", log), warm_entries.report, PRELOAD)
    child = seen(own_server / "s.json")["pid"]
    line = log.read_text().splitlines()[-1]
    assert f"the job ran as process {child}, forked from a server" in line
    assert "s of CPU, peak RSS" in line


def test_a_failing_job_fails_with_its_traceback_and_status(own_server, capfd):
    with pytest.raises(SystemExit) as raised:
        warm.run_job(warm_entries.Job(own_server / "x"), warm_entries.fail, PRELOAD)
    assert raised.value.code == 1
    err = capfd.readouterr().err
    assert "ValueError: the job's own error" in err
    assert "warm_entries.py" in err
    with pytest.raises(SystemExit) as raised:
        warm.run_job(warm_entries.Job(own_server / "x"), warm_entries.exit_3, PRELOAD)
    assert raised.value.code == 3


@pytest.mark.parametrize(
    "why, setting",
    [("warm_start is false", "config"), ("a Slurm job", "slurm")],
)
def test_without_warm_start_the_job_runs_in_its_own_process(own_server, monkeypatch, why, setting):
    job = warm_entries.Job(own_server / "s.json", warm_start=setting != "config")
    if setting == "slurm":
        monkeypatch.setenv("SLURM_JOB_ID", "1234")
    assert why in warm.enabled(job)
    warm.run_job(job, warm_entries.report, PRELOAD)
    assert seen(own_server / "s.json")["pid"] == os.getpid()


def test_a_server_that_cannot_preload_leaves_the_job_to_its_own_process(own_server, capfd):
    out = own_server / "s.json"
    warm.run_job(warm_entries.Job(out), warm_entries.report, ("no_such_module_anywhere",))
    assert seen(out)["pid"] == os.getpid()
    # (Ended before the job connected, or while it waited for an answer.)
    err = capfd.readouterr().err
    assert (
        "warm start: not used (the server it started ended with status 1)" in err
        or "warm start: not used (the server did not take the job" in err
    ), err


def test_a_server_does_not_fork_beside_another_thread():
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait, name="a-busy-thread")
    thread.start()
    try:
        assert "a-busy-thread" in warm._unsafe_threads()
    finally:
        stop.set()
        thread.join()
    assert "a-busy-thread" not in warm._unsafe_threads()


def test_a_servers_name_follows_what_a_child_inherits(own_server, monkeypatch):
    name = warm.server_name(PRELOAD)
    assert name.startswith(f"\0parity-warm-{os.getuid()}-")
    monkeypatch.setenv("PARITY_RUN_ID", "another-invocation")
    assert warm.server_name(PRELOAD) == name
    monkeypatch.setenv("OMP_NUM_THREADS", "7")
    assert warm.server_name(PRELOAD) != name
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert warm.server_name(("json", "csv")) != name


CLIENT = """
import sys
sys.path[:0] = [{tests!r}, {scripts!r}]
from parity.core import warm
from parity.core.warm import MALLOC_TUNABLES
import warm_entries
warm.IDLE_SECONDS = 2.0
warm.run_job(warm_entries.Job(sys.argv[1]), getattr(warm_entries, sys.argv[2]), ("json",))
"""


def client(out, entry, ignore_sigint=False, **kwargs):
    """A job process (a fresh interpreter) running ``entry`` through a warm server, with
    SIGINT handled as by default (a pytest-xdist worker ignores it, and so would its child
    processes) or ignored."""
    code = CLIENT.format(tests=str(REPO / "tests"), scripts=str(REPO / "scripts"))
    sigint = signal.SIG_IGN if ignore_sigint else signal.SIG_DFL
    return subprocess.Popen(
        [sys.executable, "-c", code, str(out), entry],
        preexec_fn=lambda: signal.signal(signal.SIGINT, sigint),
        **kwargs,
    )


def wait_for(path, within=30.0):
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if path.exists() and path.read_text():
            return path.read_text()
        time.sleep(0.05)
    raise AssertionError(f"{path} was not written within {within} s")


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM, signal.SIGINT])
def test_a_job_process_that_is_stopped_takes_its_child_with_it(own_server, sig):
    out = own_server / "pid"
    proc = client(out, "sleep")
    child = int(wait_for(out))
    proc.send_signal(sig)
    code = proc.wait(timeout=30)
    assert gone(child), f"the job's child {child} outlived its job process"
    if sig != signal.SIGKILL:  # passed on to the child, whose end is the job's status
        assert code == 128 + sig


def test_a_signal_the_job_process_ignores_is_ignored_by_its_child(own_server):
    out = own_server / "pid"
    proc = client(out, "sleep", ignore_sigint=True)
    child = int(wait_for(out))
    proc.send_signal(signal.SIGINT)
    assert not gone(child, within=1.0), "the child ended on a signal its job ignores"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 128 + signal.SIGTERM
    assert gone(child)


def test_two_jobs_starting_at_once_share_one_server(own_server):
    outs = [own_server / f"{i}.json" for i in range(3)]
    procs = [client(out, "report", stdout=subprocess.DEVNULL) for out in outs]
    assert [p.wait(timeout=60) for p in procs] == [0, 0, 0]
    assert len({seen(out)["ppid"] for out in outs}) == 1


def test_an_idle_server_exits(own_server):
    out = own_server / "s.json"
    warm.run_job(warm_entries.Job(out), warm_entries.report, PRELOAD)
    assert gone(seen(out)["ppid"], within=warm.IDLE_SECONDS + 10)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to connect as another user")
def test_a_server_serves_only_its_own_user(own_server):
    """A request from another user's process is dropped unread: its job never runs."""
    warm.run_job(warm_entries.Job(own_server / "mine.json"), warm_entries.report, PRELOAD)
    name = warm.server_name(PRELOAD)
    out = own_server / "theirs.json"
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # another user's job process (a fork: it needs no interpreter of root's)
        code = 2
        try:
            os.setresuid(65534, 65534, 65534)
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.connect(name)
            payload = pickle.dumps(
                {
                    "entry": "warm_entries:report",
                    "sm": warm_entries.Job(out),
                    "cwd": "/",
                    "umask": 0o022,
                    "env": {},
                    "path": sys.path,
                    "argv": ["x"],
                }
            )
            try:
                socket.send_fds(sock, [warm._HEADER.pack(len(payload))], [0, 1, 2])
                sock.sendall(payload)
                warm._receive(sock)
                code = 1  # answered: the server took it
            except (OSError, EOFError):
                code = 0  # dropped
        except BaseException as e:
            os.write(write_end, repr(e).encode())
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    os.close(write_end)
    error = os.read(read_end, 10000).decode()
    os.close(read_end)
    assert os.waitstatus_to_exitcode(status) == 0, f"the server answered another user {error}"
    assert not out.exists()


@pytest.mark.workflow
def test_traces_are_bit_identical_with_and_without_warm_start(tmp_path):
    """Real PyTorch jobs (A3 AdamW, three of its runs) warm, then each in a fresh
    interpreter: the same values, step by step, bit for bit."""
    config = load_test_config("reliability")
    for name, exp in config["experiments"].items():
        exp["enabled"] = name == "a3_adamw"
    config["experiments"]["a3_adamw"]["steps"] = 6
    traces = [
        f"results/traces/a3_adamw/{run}-{dtype}-cpu.parquet"
        for run, dtype in (("torch", "f32"), ("torch", "f64"), ("torch_foreach", "f32"))
    ]
    run_workflow(tmp_path, config, "--cores", "2", *traces)
    warm_values = {}
    for trace in traces:
        log = (tmp_path / trace.replace("traces", "logs/train")).with_suffix(".log")
        assert "warm start: the job ran as process" in log.read_text()
        reader = TraceReader(tmp_path / trace)
        warm_values[trace] = [
            (s.loss, {n: a.tobytes() for n, a in s.tensors.items()}) for s in reader.iter_steps()
        ]
    config["warm_start"] = False
    run_workflow(tmp_path, config, "--cores", "2", *traces, "--forcerun", "train_torch")
    for trace in traces:
        log = (tmp_path / trace.replace("traces", "logs/train")).with_suffix(".log")
        assert "warm start" not in log.read_text()
        reader = TraceReader(tmp_path / trace)
        cold = [
            (s.loss, {n: a.tobytes() for n, a in s.tensors.items()}) for s in reader.iter_steps()
        ]
        assert cold == warm_values[trace], trace


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to listen as another user")
def test_a_job_sends_nothing_to_a_server_of_another_user(own_server, monkeypatch, capfd):
    """Anyone may bind an abstract name first: a job that finds its server's name held by
    another user's process runs in its own process and sends that process nothing."""
    name = "\0parity-warm-test-squatter-" + str(os.getpid())
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # another user's process holding the name
        try:
            os.setresuid(65534, 65534, 65534)
            squatter = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            squatter.bind(name)
            squatter.listen(4)
            os.write(ready_w, b"1")
            conn, _ = squatter.accept()
            conn.settimeout(5)
            got = conn.recv(1)  # the job closes without sending: b""
            os._exit(0 if got == b"" else 1)
        finally:
            os._exit(2)
    assert os.read(ready_r, 1) == b"1"
    monkeypatch.setattr(warm, "server_name", lambda preload: name)
    out = own_server / "s.json"
    warm.run_job(warm_entries.Job(out), warm_entries.report, PRELOAD)
    assert seen(out)["pid"] == os.getpid()
    assert "held by a process of user id 65534" in capfd.readouterr().err
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "the job sent the stranger something"


def test_a_request_whose_job_process_gave_up_waiting_is_not_run(tmp_path):
    """A job's process that waited ``ANSWER_SECONDS`` in vain runs the job itself and
    closes its connection, with its request still queued at a busy server: the server,
    taking the request later, forks no child that would run the job a second time."""
    waiting, server_end = socket.socketpair()
    assert not warm._hung_up(server_end)  # open, nothing more to read: a job waits
    waiting.close()
    assert warm._hung_up(server_end)
    server_end.close()

    name = f"\0parity-warm-test-{os.getpid()}-{tmp_path.name}"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(name)
    listener.listen(1)
    out = tmp_path / "ran.json"
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.connect(name)
    payload = pickle.dumps(
        {
            "entry": "warm_entries:report",
            "sm": warm_entries.Job(out),
            "cwd": str(tmp_path),
            "umask": 0o022,
            "env": {},
            "path": sys.path,
            "argv": ["x"],
        }
    )
    socket.send_fds(client, [warm._HEADER.pack(len(payload))], [0, 1, 2])
    client.sendall(payload)
    client.close()  # gave up: runs the job itself
    children = {}
    try:
        warm._accept(listener, children)
    finally:
        listener.close()
    assert children == {}
    time.sleep(0.5)
    assert not out.exists()
