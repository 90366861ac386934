"""The environment a Rust runner starts in (parity.train.rust.invocation): its thread pool,
glibc's malloc kept from returning every large block to the kernel, and the pipe its frames
come through widened."""

import json
import os

import pytest

from parity.train import rust


def test_a_runner_gets_its_threads_and_the_malloc_settings(monkeypatch):
    monkeypatch.delenv("GLIBC_TUNABLES", raising=False)
    with rust.invocation({"probes": []}, 3, None) as (spec_path, env, stderr):
        with open(spec_path) as f:
            assert json.load(f) == {"probes": []}
        assert env["RAYON_NUM_THREADS"] == "3" and stderr is None
        tunables = dict(t.split("=") for t in env["GLIBC_TUNABLES"].split(":"))
    assert tunables == {
        "glibc.malloc.mmap_threshold": str(32 * 2**20),
        "glibc.malloc.trim_threshold": str(2**32 - 1),
    }
    assert not os.path.exists(spec_path)


def test_malloc_settings_the_user_gives_win(monkeypatch):
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.arena_max=1")
    with rust.invocation({}, 1, None) as (_, env, _):
        assert env["GLIBC_TUNABLES"] == "glibc.malloc.arena_max=1"


def test_the_pipe_from_a_runner_is_widened_where_linux_allows_it(tmp_path):
    fcntl = pytest.importorskip("fcntl")
    if not hasattr(fcntl, "F_SETPIPE_SZ"):
        pytest.skip("not Linux: pipes keep their size")
    read, write = os.pipe()
    try:
        assert fcntl.fcntl(read, fcntl.F_GETPIPE_SZ) < rust.PIPE_BYTES
        got = rust.widen_pipe(read)
        assert got >= rust.PIPE_BYTES
        assert fcntl.fcntl(write, fcntl.F_GETPIPE_SZ) == got
    finally:
        os.close(read)
        os.close(write)
    # Not a pipe: refused by the kernel, reported as 0, nothing raised.
    with open(tmp_path / "file", "wb") as f:
        assert rust.widen_pipe(f.fileno()) == 0
