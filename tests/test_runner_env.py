"""The environment a Rust runner starts in (parity.run.rust.invocation): its thread pool,
and glibc's malloc kept from returning every large block to the kernel."""

import json
import os

from parity.run import rust


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
