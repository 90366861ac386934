"""Remote hosts (config ``remote``, rules/remote.smk): the remote target against a real
OpenSSH server.

A throw-away sshd on 127.0.0.1 (tests/local_sshd.py; openssh-server and rsync installed
with apt when missing, skipped with the reason where they cannot be) reaches a second
checkout, a ``git clone`` of this repository in a temporary folder: the "remote host".
The remote runs the ``cpu`` target of .test/remote.yaml with this machine's virtual
environment and cargo target folder (config ``env``), so it builds and installs nothing.
"""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from parity.core.configcheck import schema_errors
from parity.core.fileio import sha256_file
from parity.plan.plan import Plan
from parity.remote import commands
from parity.remote import fetch as remote
from parity.remote.crosshost import crosshost_params, here_traces
from parity.trace.reader import TraceReader

from conftest import REPO, load_test_config, run_workflow
from local_sshd import LocalSshd, SshdStartError, install_reason

HOST = "far"
EXPERIMENT = "a3_sgd_pair"
SCHEMA = str(REPO / "schemas" / "config.schema.yaml")


# ----- no server needed -------------------------------------------------------------------


def test_config_values_reach_programs_as_single_arguments():
    host = {
        "ssh": "me@mac.local",
        "path": "~/my parity; rm -rf x",
        "devices": ["cpu"],
        "port": 2222,
        "identity": "/keys/id ed25519",
        "env": {"PATH": "/a b:$(reboot)"},
    }
    argv = commands.ssh_argv(host, commands.in_checkout(host["path"], "true"))
    assert argv[:3] == ["ssh", "-o", "BatchMode=yes"]
    assert argv[argv.index("-i") + 1] == "/keys/id ed25519"
    assert argv[argv.index("-p") + 1] == "2222"
    assert argv[-3:-1] == ["--", "me@mac.local"]
    # the one line the remote shell reads: the path and env values quoted
    assert argv[-1] == "cd \"$HOME\"/'my parity; rm -rf x' && true"
    assert commands.env_prefix(host) == "env 'PATH=/a b:$(reboot)' "
    rsync = commands.rsync_argv(host, "/abs/p", "/tmp/list", "/here")
    assert rsync[-2:] == ["me@mac.local:/abs/p/results/", "/here/"]
    assert "--delay-updates" in rsync and "--partial-dir=.rsync-partial" in rsync


def test_schema_refuses_an_option_as_destination_and_unknown_keys():
    config = load_test_config("remote")
    config["remote"] = {"mac": {"ssh": "-oProxyCommand=x", "path": "p", "devices": ["cpu"]}}
    assert any("remote.mac.ssh" in e for e in schema_errors(config, SCHEMA))
    config["remote"] = {"mac": {"ssh": "mac", "path": "p", "devices": ["cpu"], "password": "x"}}
    assert any("password" in e for e in schema_errors(config, SCHEMA))
    config["remote"] = {"Mac!": {"ssh": "mac", "path": "p", "devices": ["cpu"]}}
    assert schema_errors(config, SCHEMA)
    config["remote"] = {"mac": {"ssh": "me@mac", "path": "~/parity", "devices": ["metal", "cpu"]}}
    assert schema_errors(config, SCHEMA) == []


def test_transferred_reads_rsync_stats():
    assert commands.transferred("Number of regular files transferred: 1,204\n") == 1204
    assert commands.transferred("nothing") is None


def test_a_mac_brings_back_metal_and_its_cpu_runs_compared_with_this_cpu():
    plan = Plan(load_test_config("remote"))  # devices: [cpu] here
    params = crosshost_params(plan, "mac", ["metal", "cpu"], EXPERIMENT)
    same = {(p["reference"]["label"], p["candidate"]["label"]) for p in params["same"]}
    assert ("torch f32 cpu", "torch f32 metal@mac") in same  # no Metal here: the CPU
    assert ("candle f64 cpu", "candle f64 cpu@mac") in same
    assert not any("f64 metal" in c for _, c in same)  # float64 on Metal never runs
    comps = {(c["reference"]["label"], c["candidate"]["label"]) for c in params["comparisons"]}
    assert comps == {
        ("torch f32 cpu@mac", "candle f32 metal@mac"),
        ("torch f32 cpu@mac", "candle f32 cpu@mac"),
    }
    assert all(p["candidate"]["path"].startswith("results/remote/mac/") for p in params["same"])
    assert here_traces(params) == sorted({p["reference"]["path"] for p in params["same"]})
    assert all("/remote/" not in t for t in here_traces(params))


@pytest.mark.workflow
def test_the_remote_target_without_hosts_says_what_to_add(tmp_path):
    proc = run_workflow(tmp_path, load_test_config("remote"), "-n", "remote", check=False)
    assert proc.returncode != 0
    assert "the remote target needs remote hosts in the config" in proc.stdout


# ----- against a real sshd ------------------------------------------------------------------


@pytest.fixture(scope="module")
def sshd():
    reason = install_reason()
    if reason:
        pytest.skip(f"no local sshd can be started here: {reason}")
    server = LocalSshd()
    try:
        server.start()
    except SshdStartError as e:
        server.stop()
        pytest.skip(f"sshd could not be started here: {e}")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def checkout(tmp_path_factory):
    """The "remote host"'s checkout: a git clone of this repository, one commit behind and
    without this commit's objects, so that the remote target must push it there."""
    path = tmp_path_factory.mktemp("remote-host") / "parity"
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(path)], check=True)
    for argv in (
        ["reset", "--quiet", "--hard", "HEAD~1"],
        ["remote", "remove", "origin"],
        ["reflog", "expire", "--expire=now", "--all"],
        ["gc", "--quiet", "--prune=now"],
    ):
        subprocess.run(["git", "-C", str(path), *argv], check=True)
    missing = subprocess.run(
        ["git", "-C", str(path), "cat-file", "-e", f"{head()}^{{commit}}"], capture_output=True
    )
    assert missing.returncode != 0
    return path


def head() -> str:
    return subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()


def remote_settings(sshd, checkout, **over) -> dict:
    """The host's config: the test sshd's alias and ssh_config, and this machine's venv,
    cargo target folder and PATH for the commands run there (they build nothing new)."""
    env = {
        "PARITY_VENV": str((REPO / ".venv").resolve()),
        "CARGO_TARGET_DIR": os.environ.get("CARGO_TARGET_DIR") or str(REPO / "rust" / "target"),
        "PATH": os.environ["PATH"],
    }
    for name in ("CARGO_HOME", "RUSTUP_HOME"):
        if os.environ.get(name):
            env[name] = os.environ[name]
    return {
        "ssh": sshd.alias,
        "ssh_config": str(sshd.ssh_config),
        "path": str(checkout),
        "devices": ["cpu"],
        "cores": 2,
        "env": env,
        **over,
    }


def config_with(sshd, checkout, **over) -> dict:
    config = load_test_config("remote")
    config["remote"] = {HOST: remote_settings(sshd, checkout, **over)}
    return config


def manifest(workdir: Path) -> dict:
    return json.loads((workdir / f"results/remote/{HOST}/manifest.json").read_text())


def remote_log(workdir: Path) -> str:
    return (workdir / f"results/logs/remote/{HOST}.log").read_text()


def crosshost_rows(workdir: Path) -> list[dict]:
    return read_csv(workdir / f"results/tables/{EXPERIMENT}/crosshost-{HOST}.csv")


def read_csv(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return list(csv.DictReader(f))


#: The summary rows the host owes for .test/remote.yaml: each run and dtype made there
#: against the same run here, and the experiment's comparison on the host's CPU.
HOST_CELLS = {
    *(f"same run {run} {dt}" for run in ("torch", "candle") for dt in ("f32", "f64")),
    "main",
}


@pytest.fixture(scope="module")
def first_run(sshd, checkout, tmp_path_factory):
    workdir = tmp_path_factory.mktemp("here")
    start = time.monotonic()
    proc = run_workflow(
        workdir, config_with(sshd, checkout), "--cores", "2", "remote", timeout=1500, check=False
    )
    seconds = time.monotonic() - start
    if proc.returncode != 0:
        log = workdir / f"results/logs/remote/{HOST}.log"
        pytest.fail(
            f"the remote target failed ({proc.returncode}):\n{proc.stdout[-5000:]}\n"
            f"{log.read_text()[-5000:] if log.exists() else ''}\n{sshd.logs()}"
        )
    print(f"remote target, first run: {seconds:.0f} s")
    return workdir, proc


@pytest.mark.workflow
def test_traces_come_back_with_the_remote_checkouts_provenance(first_run, checkout):
    workdir, _ = first_run
    m = manifest(workdir)
    assert m["path"] == str(checkout.resolve()) and m["commit"] == head()
    assert "push: git" in remote_log(workdir)  # the commit went there over SSH
    assert m["host"] == HOST and m["devices"] == ["cpu"] and m["remote"]["cpu"]
    # the remote checkout was moved to this commit and ran with the config sent to it
    at = subprocess.run(
        ["git", "-C", str(checkout), "rev-parse", "HEAD"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert at == head()
    assert (checkout / remote.REMOTE_CONFIG).is_file()
    traces = {p for p in m["files"] if "/traces/" in p}
    assert traces == {
        f"results/remote/{HOST}/traces/{EXPERIMENT}/{run}-{dt}-cpu.parquet"
        for run in ("torch", "candle")
        for dt in ("f32", "f64")
    }
    assert any("/probes/conv1d_grad/" in p for p in m["files"])
    for here, sha in m["files"].items():
        there = checkout / "results" / Path(here).relative_to(f"results/remote/{HOST}")
        # byte for byte the remote checkout's files, as the manifest recorded them
        assert sha256_file(workdir / here) == sha256_file(there) == sha
    meta = TraceReader(workdir / sorted(traces)[0]).meta
    assert meta["host"] == m["remote"]["hostname"]
    assert meta["runner"]["cpu"] == m["remote"]["cpu"]


@pytest.mark.workflow
def test_cross_host_tables_hold_each_run_and_comparison(first_run):
    workdir, _ = first_run
    rows = crosshost_rows(workdir)
    same = [r for r in rows if r["kind"] == "same run"]
    assert {(r["reference"], r["candidate"]) for r in same} == {
        (f"{run} {dt} cpu", f"{run} {dt} cpu@{HOST}")
        for run in ("torch", "candle")
        for dt in ("f32", "f64")
    }
    # one machine plays both hosts here: the same code on the same CPU agrees bit for bit
    assert all(r["bitwise_identical"] == "True" and float(r["worst_dparam"]) == 0 for r in same)
    (comp,) = [r for r in rows if r["kind"] == "comparison"]
    assert comp["reference"] == f"torch f32 cpu@{HOST}"
    assert comp["candidate"] == f"candle f32 cpu@{HOST}"
    assert comp["verdict"] == "pass"
    md = (workdir / f"results/tables/{EXPERIMENT}/crosshost-{HOST}.md").read_text()
    assert f"Remote host {HOST} (" in md and "cpu@far" in md


@pytest.mark.workflow
def test_the_summary_and_check_hold_the_hosts_cells(first_run, sshd, checkout):
    workdir, _ = first_run
    rows = read_csv(workdir / "results/tables/summary.csv")
    there = {r["comparison"]: r for r in rows if r["device"] == f"cpu@{HOST}"}
    assert set(there) == HOST_CELLS
    for r in there.values():
        assert r["verdict"] == r["expected_verdict"] == "pass", r
        assert float(r["tolerance"]) == 1e-6
    for run in ("torch", "candle"):
        same = there[f"same run {run} f32"]
        assert same["pair"] == f"{run} f32 cpu vs {run} f32 cpu@{HOST}"
        # one machine plays both hosts: the same run agrees bit for bit
        assert same["bitwise_identical"] == "True" and float(same["worst_dparam"]) == 0.0
    assert there["main"]["pair"] == f"torch f32 cpu@{HOST} vs candle f32 cpu@{HOST}"
    # the remote's comparison equals the same comparison made here, value for value
    (here,) = [r for r in rows if r["device"] == "cpu" and r["comparison"] == "main"]
    assert float(there["main"]["worst_dparam"]) == float(here["worst_dparam"])
    md = (workdir / "results/tables/summary.md").read_text()
    assert f"same run candle f64 | cpu@{HOST}" in md
    record = json.loads((workdir / "results/tables/summary.sources.json").read_text())
    assert f"results/compare/{EXPERIMENT}/crosshost-{HOST}.json" in record["made_from"]
    # check reads the same summary: every row, the host's included, meets its expectation
    run_workflow(workdir, config_with(sshd, checkout), "--cores", "1", "check")
    check_log = (workdir / "results/logs/check.log").read_text()
    assert f"{len(rows)} comparisons, 0 differ from their expectation" in check_log


@pytest.mark.workflow
def test_the_probe_table_judges_the_hosts_probe_results(first_run):
    workdir, _ = first_run
    rows = read_csv(workdir / "results/tables/probes.csv")
    key = ("probe", "case", "quantity", "framework", "dtype")
    here = {tuple(r[k] for k in key): r for r in rows if r["device"] == "cpu"}
    there = {tuple(r[k] for k in key): r for r in rows if r["device"] == f"cpu@{HOST}"}
    assert set(there) == set(here) and there
    assert {k[3] for k in there} == {"torch", "candle", "burn"}
    assert {k[4] for k in there} == {"f32", "f64"}
    for k, r in there.items():
        # the same values as here (one machine plays both hosts), judged against this
        # host's PyTorch: its reference rows are ordinary rows there, and pass
        assert r["values"] == here[k]["values"], k
        if here[k]["verdict"] == "reference":
            assert r["verdict"] == "pass", r
            assert r["reference"] in {"exact", f"torch {k[4]} cpu"}, r
        else:
            assert (r["verdict"], r["reference"]) == (here[k]["verdict"], here[k]["reference"])


@pytest.mark.workflow
def test_a_rerun_copies_nothing_and_recomputes_nothing(first_run, sshd, checkout):
    workdir, _ = first_run
    config = config_with(sshd, checkout)
    proc = run_workflow(workdir, config, "--cores", "2", "remote")
    assert "Nothing to be done" in proc.stdout
    before = {p: p.stat().st_mtime_ns for p in (checkout / "results/traces").rglob("*.parquet")}
    # the host's job again: the remote reruns nothing and rsync copies nothing
    run_workflow(workdir, config, "--cores", "2", "remote", "--forcerun", "remote_fetch")
    assert manifest(workdir)["transferred"] == 0
    assert "Nothing to be done" in remote_log(workdir)
    after = {p: p.stat().st_mtime_ns for p in (checkout / "results/traces").rglob("*.parquet")}
    assert after == before


@pytest.mark.workflow
def test_a_cut_transfer_leaves_nothing_half_copied_and_a_rerun_resumes(
    first_run, sshd, checkout, tmp_path
):
    # The remote's rsync is killed 3 s into a transfer throttled to 1 KiB/s (the files are
    # 3.5 to 12 KB): the connection drops with a file half-sent.
    cut = sshd.dir / "rsync-cut"
    cut.write_text('#!/bin/sh\nexec timeout -s KILL 3 rsync "$@"\n')
    cut.chmod(0o755)
    workdir = tmp_path / "here"
    config = config_with(sshd, checkout, bwlimit=1, rsync_path=str(cut))
    target = f"results/remote/{HOST}/manifest.json"
    proc = run_workflow(workdir, config, "--cores", "2", target, check=False)
    assert proc.returncode != 0
    assert f"remote {HOST}: the transfer stopped" in proc.stdout
    # rsync's own account: data was flowing when the connection dropped
    received = re.search(
        r"connection unexpectedly closed \((\d+) bytes received so far\) \[receiver\]",
        remote_log(workdir),
    )
    assert received and int(received.group(1)) > 1000, remote_log(workdir)[-3000:]
    # the summary names the host and its missing cells
    with open(workdir / "results/tables/remote.partial.csv", encoding="utf-8") as f:
        partial = list(csv.DictReader(f))
    assert {r["host"] for r in partial} == {HOST}
    assert f"{EXPERIMENT} torch f32 cpu@{HOST}" in {r["cell"] for r in partial}
    assert all(r["stage"] == "rsync" for r in partial)
    assert not (workdir / target).exists()
    # ... and so does the partial summary, each cell the host owes an error row naming
    # the host, the stage that failed and its log
    summary = read_csv(workdir / "results/tables/summary.partial.csv")
    there = {r["comparison"]: r for r in summary if r["device"] == f"cpu@{HOST}"}
    assert set(there) == HOST_CELLS
    for r in there.values():
        assert r["verdict"] == "error"
        assert (
            f"remote host {HOST}: rsync failed (remote {HOST}: the transfer stopped"
            in (r["status"])
        )
        assert f"see results/logs/remote/{HOST}.log" in r["status"]
    # and the partial probe table, each of the host's probe cells
    probes = read_csv(workdir / "results/tables/probes.partial.csv")
    there = [r for r in probes if r["device"] == f"cpu@{HOST}"]
    assert {r["framework"] for r in there} == {"torch", "candle", "burn"}
    assert all(r["verdict"] == "error" for r in there)
    assert all(f"remote host {HOST}: rsync failed" in r["note"] for r in there)
    # nothing half-copied under a result's name: what is there is whole and the remote's
    results = workdir / f"results/remote/{HOST}"
    partial_files = [p for p in results.rglob("*") if commands.PARTIAL_DIR in p.parts]
    for p in results.rglob("*.parquet"):
        if commands.PARTIAL_DIR in p.parts:
            continue
        there = checkout / "results" / p.relative_to(results)
        assert sha256_file(p) == sha256_file(there)
    print(f"after the cut: {len(partial_files)} files waiting in {commands.PARTIAL_DIR}")
    # a rerun (no throttle) resumes and completes; the remote recomputes nothing
    run_workflow(workdir, config_with(sshd, checkout), "--cores", "2", target)
    m = manifest(workdir)
    assert len(m["files"]) == len(manifest(first_run[0])["files"])
    assert "Nothing to be done" in remote_log(workdir)
    assert not (workdir / f"results/remote/{HOST}/status.json").exists()


@pytest.mark.workflow
def test_an_unreachable_host_a_failed_bootstrap_and_a_dirty_checkout_are_named(
    sshd, checkout, tmp_path
):
    closed = remote_settings(sshd, checkout)
    config = load_test_config("remote")
    config["remote"] = {
        HOST: {
            **closed,
            "ssh": "nobody@127.0.0.1",
            "ssh_config": "/dev/null",
            "port": sshd.port + 1 if sshd.port < 65535 else 1,
        }
    }
    target = f"results/remote/{HOST}/manifest.json"
    proc = run_workflow(tmp_path / "a", config, "--cores", "1", target, check=False)
    assert proc.returncode != 0
    assert f"remote {HOST}: unreachable" in proc.stdout
    assert f"{HOST}: 4 cells missing" in proc.stdout
    summary = read_csv(tmp_path / "a/results/tables/summary.partial.csv")
    there = {r["comparison"]: r["status"] for r in summary if r["device"] == f"cpu@{HOST}"}
    assert set(there) == HOST_CELLS
    assert all(
        f"remote host {HOST}: connect failed (remote {HOST}: unreachable" in s
        for s in there.values()
    )
    # a bootstrap that fails there (no cargo on the PATH the host's env gives)
    bare = remote_settings(sshd, checkout)
    bare["env"] = {"PATH": "/usr/bin:/bin"}
    config["remote"] = {HOST: bare}
    proc = run_workflow(tmp_path / "c", config, "--cores", "1", target, check=False)
    assert proc.returncode != 0
    assert f"remote {HOST}: bootstrap failed (exit 1)" in proc.stdout
    assert "cargo not found" in proc.stdout
    assert f"{HOST}: 4 cells missing" in proc.stdout
    dirty = tmp_path / "dirty"
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(dirty)], check=True)
    (dirty / "README.md").write_text("edited there\n")
    proc = run_workflow(
        tmp_path / "b", config_with(sshd, dirty), "--cores", "1", target, check=False
    )
    assert proc.returncode != 0
    assert "has uncommitted changes" in proc.stdout and "nothing was run" in proc.stdout
    assert not (dirty / remote.REMOTE_CONFIG).exists()
