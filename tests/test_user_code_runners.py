"""A Rust runner running the user's port that hangs or prints to standard output
(docs/own-model.md, "Errors you may meet"): every call into a runner (training, replay,
``inspect``, the op probes) is watched, a line every 30 s says what the job waits on, a
runner without output for ``limits.user_code_idle_seconds`` is stopped with one line naming
the experiment, the binary and the pid, and text on the frame channel is shown and named.

The runners here are fake scripts (no build); tests/test_own_port_prints.py runs a real port
that prints."""

from __future__ import annotations

import io
import logging
import os
import re
import sys
from pathlib import Path

import pytest

from parity.core import watchdog
from parity.plan.keys import RunKey
from parity.plan.plan import Plan
from parity.trace import fixtures
from parity.trace.frames import FrameError, printed_text, read_frames
from parity.train import own_check
from parity.train import rust as rust_runner

from conftest import load_config, record_binary

LOG = logging.getLogger("test-user-code")
KEY = RunKey("a3_sgd", "candle", "f32", "cpu")

#: A runner that does what FAKE_MODE says: hang (print nothing, never end), print (a debug
#: line on standard output, then end), talk (a line on standard error every 0.1 s for
#: FAKE_TALK seconds, then end without output), json (a debug line, then inspect's JSON).
FAKE = """#!{python}
import os, sys, time
mode = os.environ["FAKE_MODE"]
if mode == "hang":
    while True:
        time.sleep(1)
if mode == "print":
    print("debug: built the model, 2 layers")
    sys.exit(0)
if mode == "talk":
    end = time.monotonic() + float(os.environ["FAKE_TALK"])
    while time.monotonic() < end:
        print("step", file=sys.stderr, flush=True)
        time.sleep(0.1)
    sys.exit(0)
if mode == "json":
    print("debug: forward")
    print('{{"params": []}}')
"""


@pytest.fixture
def fake(tmp_path) -> str:
    path = tmp_path / "bin" / "candle-parity"
    path.parent.mkdir(parents=True)
    path.write_text(FAKE.format(python=sys.executable))
    path.chmod(0o755)
    record_binary(path, "fake")
    return str(path)


@pytest.fixture(scope="module")
def a3(tmp_path_factory):
    """A built-in experiment's run settings and fixture: what the Python side hands a
    runner (the fake reads neither)."""
    plan = Plan(load_config())
    fx = tmp_path_factory.mktemp("fx") / "fx.safetensors"
    fixtures.write(fx, plan.fixture_settings("a3_sgd"))
    return plan.run_settings("a3_sgd", "candle"), str(fx)


@pytest.fixture
def quick(monkeypatch):
    """An idle limit of 1.5 s and a progress line every 0.3 s without output."""
    monkeypatch.setattr(watchdog, "PROGRESS_SECONDS", 0.3)
    watchdog.configure({"limits": {"user_code_idle_seconds": 1.5}})
    yield
    watchdog.configure(None)


def gone(message: str) -> None:
    """The pid a stop message names is no process any more."""
    pid = int(re.search(r"pid (\d+)\)", message)[1])
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_the_idle_limit_is_the_configs_setting():
    assert watchdog.configure({"limits": {"user_code_idle_seconds": 42}}) == 42
    assert watchdog.idle_seconds() == 42
    assert watchdog.configure({}) == 600


def test_a_training_runner_that_hangs_is_stopped_naming_experiment_binary_and_pid(
    fake, a3, quick, tmp_path, monkeypatch, capsys
):
    settings, fx = a3
    monkeypatch.setenv("FAKE_MODE", "hang")
    log_path = tmp_path / "train.log"
    with pytest.raises(rust_runner.RunnerError) as e:
        rust_runner.train(KEY, settings, fx, fake, str(tmp_path / "t"), 1, LOG, str(log_path))
    message = str(e.value)
    assert "\n" not in message
    assert message.startswith(f"a3_sgd: the candle f32 cpu run's training ({fake}, pid ")
    assert re.search(r"made no progress for (1\.[5-9]|[2-9](\.\d)?) s \(no output", message)
    assert "raise limits.user_code_idle_seconds (now 1.5)" in message
    gone(message)
    assert not (tmp_path / "t").exists()
    waiting = [x for x in capsys.readouterr().err.splitlines() if "INFO waiting on" in x]
    assert waiting, "no progress line while it waited"
    assert f"waiting on a3_sgd: the candle f32 cpu run's training ({fake}, pid " in waiting[0]
    assert "limits.user_code_idle_seconds is 1.5" in waiting[0]


def test_text_on_the_frame_channel_is_shown_and_named(fake, a3, tmp_path, monkeypatch):
    settings, fx = a3
    monkeypatch.setenv("FAKE_MODE", "print")
    with pytest.raises(rust_runner.RunnerError) as e:
        rust_runner.train(KEY, settings, fx, fake, str(tmp_path / "t"), 1, LOG, None)
    message = str(e.value)
    assert "is implausible" in message
    assert "starts with text 'debug: built the model, 2 layers\\n'" in message
    assert "writes to the runner's standard output; use eprintln!" in message


def test_an_inspect_that_hangs_is_stopped_by_own_check(fake, a3, quick, tmp_path, monkeypatch):
    settings, fx = a3
    monkeypatch.setenv("FAKE_MODE", "hang")
    with pytest.raises(rust_runner.RunnerError) as e:
        own_check.own_check(KEY, settings, fx, fake, str(tmp_path / "c.json"), LOG, None)
    message = str(e.value)
    assert message.startswith(f"a3_sgd: the candle port's inspect (own_check) ({fake}, pid ")
    assert "made no progress" in message and "limits.user_code_idle_seconds" in message
    gone(message)
    assert not (tmp_path / "c.json").exists()


def test_an_inspect_whose_json_follows_a_printed_line_says_so(fake, a3, tmp_path, monkeypatch):
    settings, fx = a3
    monkeypatch.setenv("FAKE_MODE", "json")
    with pytest.raises(rust_runner.RunnerError) as e:
        own_check.own_check(KEY, settings, fx, fake, str(tmp_path / "c.json"), LOG, None)
    message = str(e.value)
    assert "inspect wrote no JSON" in message
    assert "its output starts with 'debug: forward?{\"params\": []}?'" in message
    assert "the port writes to standard output; use eprintln!" in message


def test_a_replay_that_hangs_is_stopped_naming_what_it_replays(fake, quick, monkeypatch):
    monkeypatch.setenv("FAKE_MODE", "hang")
    what = "a3_sgd: the candle f32 cpu run's replay of step 3"
    with pytest.raises(rust_runner.RunnerError) as e:
        rust_runner.run_frames(fake, ["replay", "--step", "3"], {}, 1, None, what)
    assert str(e.value).startswith(f"{what} ({fake}, pid ")
    gone(str(e.value))


def test_a_probe_batch_that_hangs_is_stopped(fake, quick, monkeypatch):
    from parity.probe import rust as rust_probe

    monkeypatch.setenv("FAKE_MODE", "hang")
    with pytest.raises(rust_runner.RunnerError) as e:
        rust_probe.header_metadata("candle", fake, 1, None)
    assert str(e.value).startswith(f"the candle op probes (an empty batch) ({fake}, pid ")


def test_a_runner_that_keeps_writing_to_its_log_is_not_stopped(fake, tmp_path, monkeypatch):
    """Progress is output on either channel: lines on standard error (the job's log) for
    twice the limit keep it running to its end."""
    watchdog.configure({"limits": {"user_code_idle_seconds": 2.5}})
    monkeypatch.setenv("FAKE_MODE", "talk")
    monkeypatch.setenv("FAKE_TALK", "5")
    log_path = tmp_path / "job.log"
    try:
        assert rust_runner.run_frames(fake, ["probe"], {}, 1, str(log_path)) == []
    finally:
        watchdog.configure(None)
    assert log_path.read_text().count("step") >= 25


def test_printed_text_is_recognised_and_frames_are_not():
    assert printed_text(b"\x2c\x01\x00\x00\x00\x00\x00\x00{") is None
    assert printed_text(b"\x00" * 8) is None
    hint = printed_text(b"loss 0.25\n" * 10)
    assert hint.startswith("the stream starts with text 'loss 0.25\\nloss 0.25\\n")
    assert "…, not a frame" in hint and "use eprintln!" in hint
    # a stream that starts with a short line, whose length reads as a small frame
    with pytest.raises(FrameError, match=r"starts with text 'hi\\n"):
        list(read_frames(io.BytesIO(b"hi\n\x00\x00\x00\x00\x00" + b"x" * 10)))
    # binary garbage gets no hint
    with pytest.raises(FrameError) as e:
        list(read_frames(io.BytesIO(b"\xff" * 16)))
    assert "text" not in str(e.value)


def test_the_watch_counts_its_own_lines_as_no_progress(tmp_path):
    """Its progress lines go to the job's log, the file the runner's standard error goes
    to: were they progress, a hung runner would never be stopped."""
    import subprocess

    log = open(tmp_path / "job.log", "ab")  # noqa: SIM115
    saved = sys.stderr
    sys.stderr = open(tmp_path / "job.log", "a", buffering=1)  # noqa: SIM115
    try:
        proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], stderr=log)
        with watchdog.Watch(proc, "x", "py", log, idle=1.5, progress=0.2) as w:
            proc.wait()
    finally:
        sys.stderr.close()
        sys.stderr = saved
        log.close()
    assert w.stopped and "made no progress" in w.stopped
    assert Path(tmp_path / "job.log").read_text().count("INFO waiting on x") >= 3
