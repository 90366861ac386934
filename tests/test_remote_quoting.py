"""Every value of a remote host's config reaches ssh, rsync, git and the remote shell as one
word, or the config is refused before any job, naming the key (issue 36, kind 1); and a
file that comes back is read whole before it is recorded as good (kind 5).

Against a fake remote (tests/fake_remote.py): a fake ``ssh`` that runs what it is asked
with ``sh -c`` in a fake home, reached directly, through rsync's ``-e`` and through git's
``core.sshCommand``; the real rsync and git run at both ends.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
from pathlib import Path

import numpy as np
import pytest

from parity.core.configcheck import schema_errors
from parity.core.fileio import sha256_file
from parity.remote import commands
from parity.remote import fetch as remote
from parity.trace.reader import TraceReader

from conftest import REPO, load_test_config, run_workflow, write_trace
from fake_remote import FakeRemote, git

SCHEMA = str(REPO / "schemas" / "config.schema.yaml")
HOST = "far"
#: Shell metacharacters, spaces, both quotes, a backslash, globs: what a remote shell would
#: run, split or expand if it were not one quoted word. No slash: it is part of file names.
ODD = "a b;touch PWNED 'q' \"d\" $(touch PWNED) `touch PWNED` \\ * ~ & | > < #"
TRACE = "results/traces/hand/torch-f32-cpu.parquet"
EXPECT = {"experiment": "hand", "run": "torch", "dtype": "f32", "device": "cpu"}

pytestmark = pytest.mark.skipif(
    not (shutil.which("rsync") and shutil.which("git")), reason="needs rsync and git"
)


def trace_bytes(tmp_path: Path) -> bytes:
    """A trace made on the fake remote's machine (this one: its host name)."""
    rng = np.random.default_rng(3)
    steps = [{"w": rng.standard_normal(4096)} for _ in range(3)]
    path = write_trace(tmp_path / "made.parquet", steps, host=socket.gethostname())
    return path.read_bytes()


@pytest.fixture
def fake(tmp_path, monkeypatch):
    fake = FakeRemote(tmp_path / "fake")
    monkeypatch.setenv("PATH", fake.path_env())
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return fake


def odd_settings(fake: FakeRemote) -> tuple[dict, Path, Path]:
    """Settings with an odd value in every key that takes text, and the rsync program's
    marker; (settings, the checkout there, the marker)."""
    program, marker = fake.rsync_wrapper(f"rsync {ODD}")
    settings = {
        "ssh": "farhost",
        # ~/ is the remote home; the name ends in a space, which must survive too
        "path": f"~/co {ODD} ",
        "devices": ["cpu"],
        "port": 2222,
        "identity": str(fake.root / f"id {ODD}"),
        "ssh_config": str(fake.root / f"cfg {ODD}"),
        "cores": 3,
        "bwlimit": 100000,
        "rsync_path": str(program),
        "bootstrap": True,
        "env": {"ODD": ODD, "EMPTY": ""},
    }
    return settings, fake.home / f"co {ODD} ", marker


def fetch_params(settings: dict, commit: str) -> dict:
    return {
        "host": HOST,
        "settings": settings,
        "commit": commit,
        "config": {"devices": ["cpu"]},
        "traces": {TRACE: EXPECT},
        "probes": [],
        "labels": {TRACE: f"hand torch f32 cpu@{HOST}"},
    }


def run_job(fake: FakeRemote, params: dict) -> dict:
    manifest = remote.REMOTE_MANIFEST.format(host=HOST)
    return remote.remote_fetch(params, manifest, logging.getLogger("test"), str(fake.here))


def test_every_value_travels_as_one_word(fake, tmp_path):
    settings, checkout, marker = odd_settings(fake)
    commit = fake.make_checkout({TRACE.removeprefix("results/"): trace_bytes(tmp_path)})
    assert schema_errors({**load_test_config("remote"), "remote": {HOST: settings}}, SCHEMA) == []
    record = run_job(fake, fetch_params(settings, commit))
    # nothing the values hold ran anywhere
    assert not list(tmp_path.rglob("PWNED"))
    # the checkout there is exactly the path (a trailing space included), at the commit
    assert checkout.is_dir() and record["path"] == str(checkout.resolve())
    assert (checkout / ".git").is_dir()
    assert remote_head(checkout) == commit
    # the commands run there saw each value exactly
    for tool in ("bootstrap", "snakemake"):
        env = fake.recorded(checkout, tool)["env"]
        assert env["ODD"] == ODD and env["EMPTY"] == ""
    argv = fake.recorded(checkout, "snakemake")["argv"]
    assert argv == ["cpu", "--cores", "3", "--configfile", remote.REMOTE_CONFIG]
    # rsync ran the program rsync_path names, which is exactly the path
    assert marker.read_text().splitlines() == [settings["rsync_path"]]
    # every ssh (the job's own, rsync's -e, git's core.sshCommand) got each option whole
    calls = fake.calls()
    assert any("git-receive-pack" in c["command"] for c in calls)  # git push came through
    assert any("--server" in c["command"] for c in calls)  # and rsync
    for c in calls:
        assert c["dest"] == "farhost"
        opts = c["opts"]
        assert opts[opts.index("-i") + 1] == settings["identity"]
        assert opts[opts.index("-F") + 1] == settings["ssh_config"]
        assert opts[opts.index("-p") + 1] == "2222"
    # the trace came back and was read whole
    local = remote.remote_file(HOST, TRACE)
    assert record["files"] == {local: sha256_file(local)}
    assert sha256_file(local) == sha256_file(checkout / TRACE)


def remote_head(checkout: Path) -> str:
    return git("rev-parse", "HEAD", cwd=checkout)


def test_a_fetched_trace_with_a_flipped_bit_in_a_page_is_not_recorded_as_good(fake, tmp_path):
    settings = {"ssh": "farhost", "path": "~/parity", "devices": ["cpu"], "bootstrap": False}
    commit = fake.make_checkout({TRACE.removeprefix("results/"): trace_bytes(tmp_path)})
    params = fetch_params(settings, commit)
    manifest = Path(remote.REMOTE_MANIFEST.format(host=HOST))
    run_job(fake, params)
    local = Path(remote.remote_file(HOST, TRACE))
    good = sha256_file(local)
    # a bit flipped in the middle of a data page; size and time kept, so rsync, which
    # compares those, copies nothing the next time
    offset, size = TraceReader(local).byte_range(0)
    stat = local.stat()
    data = bytearray(local.read_bytes())
    data[offset + size // 2] ^= 0x04
    local.write_bytes(bytes(data))
    os.utime(local, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    TraceReader(local)  # its footer and seal are intact: opening alone passes
    with pytest.raises(commands.RemoteError) as e:
        run_job(fake, params)
    message = str(e.value)
    assert f"hand torch f32 cpu@{HOST}" in message and str(local) in message
    assert "CRC checksum verification failed" in message
    assert "removed here, a rerun fetches it again" in message
    assert not manifest.exists()  # nothing is recorded as good
    assert not local.exists()
    # the rerun fetches it again, whole
    record = run_job(fake, params)
    assert record["files"] == {str(local): good}


def test_a_probe_result_with_a_flipped_bit_is_not_recorded_as_good(tmp_path, monkeypatch):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from parity.core import integrity
    from parity.probe.results import METADATA_KEY

    monkeypatch.chdir(tmp_path)
    probe = "results/probes/p/torch-f32-cpu.parquet"
    local = Path(remote.remote_file(HOST, probe))
    local.parent.mkdir(parents=True)
    table = pa.table({"v": pa.array(np.arange(20000, dtype=np.float64))})
    table = table.replace_schema_metadata(integrity.seal(METADATA_KEY, "{}"))
    pq.write_table(table, local, compression="none", **integrity.PARQUET_WRITE)
    job = remote.FetchJob(HOST, {}, "c", {}, probes=[probe])
    assert remote.verify(job)[1] == []
    data = bytearray(local.read_bytes())
    data[len(data) // 3] ^= 0x01
    local.write_bytes(bytes(data))
    good, missing = remote.verify(job)
    assert good == {} and len(missing) == 1 and probe in missing[0]
    assert not local.exists()


# ----- what cannot travel as one word is refused, naming the key ------------------------


#: Per key, values that hold a metacharacter, a space, a quote or a newline and that the
#: schema refuses (the others travel: test_every_value_travels_as_one_word).
REFUSED = {
    "ssh": ["far;x", "far x", "far'x", 'far"x', "far\nx", "far$(x)", "-oProxyCommand=x"],
    "path": ["co\nx", "co\rx", "co\x00x", "-x"],
    "identity": ["id\nx", "id\tx", "-x"],
    "ssh_config": ["c\nx", "-x"],
    "rsync_path": ["r\nx", "-x"],
    "port": ["22;x", "22 x", "'22'", 0],
    "cores": ["2;x", "all x", "'all'", "all\n"],
    "bwlimit": ["1;x", "1 x"],
    "bootstrap": ["yes;x", "true x"],
    "devices": [["cpu;x"], ["cpu x"], ["cpu\n"]],
}


@pytest.mark.parametrize(
    "key,value", [(k, v) for k, values in REFUSED.items() for v in values], ids=repr
)
def test_a_value_that_cannot_travel_as_one_word_is_refused_naming_its_key(key, value):
    base = {"ssh": "farhost", "path": "~/p", "devices": ["cpu"]}
    config = {**load_test_config("remote"), "remote": {HOST: {**base, key: value}}}
    errors = schema_errors(config, SCHEMA)
    assert any(e.startswith(f"remote.{HOST}.{key}") for e in errors), errors


@pytest.mark.parametrize("value", ["a\nb", "a\tb", "a\x00b", "a\x7fb", "a\rb"], ids=repr)
def test_an_env_value_with_a_control_character_is_refused_naming_its_key(value):
    host = {"ssh": "farhost", "path": "~/p", "devices": ["cpu"], "env": {"ODD": value}}
    errors = schema_errors({**load_test_config("remote"), "remote": {HOST: host}}, SCHEMA)
    assert any(e.startswith(f"remote.{HOST}.env.ODD") for e in errors), errors


@pytest.mark.parametrize("name", ["A;B", "A B", "A'B", "A\nB", "A=B", "$(x)"], ids=repr)
def test_an_env_name_that_is_not_a_name_is_refused_naming_the_key(name):
    host = {"ssh": "farhost", "path": "~/p", "devices": ["cpu"], "env": {name: "v"}}
    errors = schema_errors({**load_test_config("remote"), "remote": {HOST: host}}, SCHEMA)
    assert any(e.startswith(f"remote.{HOST}.env") and repr(name) in e for e in errors), errors


def test_rsync_runs_without_its_own_argument_protection():
    env = commands.rsync_env({"RSYNC_PROTECT_ARGS": "1", "HOME": "/h"})
    assert env == {"RSYNC_PROTECT_ARGS": "0", "RSYNC_OLD_ARGS": "2", "HOME": "/h"}
    argv = commands.rsync_argv(
        {"ssh": "h", "rsync_path": "/a b/rsync"}, "/x y", "/tmp/list", "/here"
    )
    assert "--rsync-path='/a b/rsync'" in argv
    assert argv[-2:] == ["h:'/x y/results/'", "/here/"]


@pytest.mark.workflow
def test_the_workflow_refuses_such_a_config_before_any_job(tmp_path):
    config = load_test_config("remote")
    config["remote"] = {HOST: {"ssh": "far", "path": "p", "devices": ["cpu"], "env": {"X": "a\nb"}}}
    proc = run_workflow(tmp_path, config, "-n", check=False)
    assert proc.returncode != 0
    assert "invalid config (nothing was run)" in proc.stdout
    assert f"remote.{HOST}.env.X" in proc.stdout
