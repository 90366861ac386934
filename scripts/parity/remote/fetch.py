"""Remote hosts (config ``remote``): run a device's jobs on another machine over SSH, bring
its traces and probe results back, and compare them here.

One host's job from commit to checked manifest, each step a function below; the ssh and
rsync commands it runs are ``commands``'s, the cross-host comparison is ``crosshost``.

One job per host (``rules/remote.smk``, :func:`remote_fetch`):

0. every program the job runs here (ssh, git, rsync: ``commands.LOCAL_TOOLS``) is on
   ``PATH``, or the job is refused naming it and the host before any remote work (the
   rules refuse it already while the DAG is built); the first contact checks that the
   remote's shell finds git and rsync's program there before it makes anything;
1. the remote checkout is put at this checkout's commit: ``git push`` of the commit over
   the same SSH connection to ``refs/parity/sync`` of the remote repository (made with
   ``git init`` when the folder has none), then ``git checkout --detach``; a remote working
   tree with uncommitted changes to tracked files is refused, nothing is run there;
2. the config this run uses is written there (``results/remote-config.yaml``: the merged
   config with ``devices`` the host's devices), then ``scripts/dev/bootstrap`` and
   ``.venv/bin/snakemake --cores N --configfile results/remote-config.yaml <device…>``
   run there (the repository's own per-device targets, so finished results are reused);
3. rsync brings back exactly the files the plan names for the host (``--files-from``),
   into ``results/remote/{host}/``; a file being copied lives in a ``.rsync-partial``
   folder until every file of the transfer is complete (``--delay-updates``), so a cut
   transfer leaves no half-copied file under a trace's name, and a rerun resumes it;
4. every file brought back is read whole by its reader (sealed metadata, and every page
   against its checksum; a file that fails is named and removed, so that a rerun fetches
   it again) and its sealed host and CPU held to what the remote reported of itself
   (:func:`describe_host`, :func:`provenance_problem`: a file made on another machine is
   refused naming both), and the manifest (``results/remote/{host}/manifest.json``, the
   job's only output) is written last, atomically: what came back, its sha256, the
   remote's commit, host, CPU.

Transport and credentials are OpenSSH's and rsync's (``parity.remote.commands``): every
value reaches a program as one word, one argument of an argument list here and quoted
with :func:`shlex.quote` wherever the remote shell reads it (the command lines ssh runs,
rsync's remote path and ``--rsync-path``); the remote checkout's absolute path, which the
remote reports, is treated the same way.

Pure Python apart from the subprocesses :func:`remote_fetch` starts.
"""

from __future__ import annotations

import json
import logging
import shlex
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from parity.core import paths
from parity.core.fileio import write_text_atomic
from parity.core.hosts import REMOTE_STATUS, device_label, host_runs, host_status, remote_file
from parity.plan.keys import RunKey
from parity.remote.commands import (
    MISSING_THERE,
    RemoteError,
    Runner,
    env_prefix,
    in_checkout,
    last_lines,
    local_tool_problem,
    quote_path,
    remote_tools_check,
    rsync_argv,
    rsync_env,
    shell_line,
    source_change_problem,
    ssh_options,
    transferred,
)
from parity.remote.verify import describe_host, verify

#: Where a host's files come back (relative to the working directory): the remote's
#: ``results/`` layout below it (``traces/…``, ``probes/…``).
REMOTE_DIR = paths.REMOTE_DIR
REMOTE_MANIFEST = paths.REMOTE_MANIFEST
#: What the last failed attempt of a host left: the stage that failed, the error and the
#: missing cells (read by the partial summary after a failed run).
REMOTE_LOG = paths.REMOTE_LOG
#: The config the remote runs with, inside the remote checkout.
REMOTE_CONFIG = "results/remote-config.yaml"
#: The ref of the remote repository the commit is pushed to.
SYNC_REF = "refs/parity/sync"


# ----- what a host makes ---------------------------------------------------------------


def remote_config(config: Mapping[str, Any], devices: Sequence[str]) -> dict:
    """The config the remote runs: this run's merged config with the host's devices, none
    imported, and no remote hosts of its own."""
    out = json.loads(json.dumps(dict(config)))
    out["devices"] = list(devices)
    out["imported_devices"] = []
    out.pop("remote", None)
    return out


# ----- the job -----------------------------------------------------------------------------


@dataclass
class FetchJob:
    """What a host's job receives as params (plain data)."""

    host: str
    settings: dict
    commit: str
    config: dict
    traces: dict[str, dict] = field(default_factory=dict)  # local path → expectation
    probes: list[str] = field(default_factory=list)  # local paths of probe results
    labels: dict[str, str] = field(default_factory=dict)  # local path → cell label


def cell_label(key: RunKey, host: str) -> str:
    """``a3_sgd torch f32 cpu@mac``."""
    return f"{key.experiment} {key.run} {key.dtype} {device_label(key.device, host)}"


def fetch_params(
    plan, probe_results: Sequence[str], host: str, settings: Mapping, commit: str, config: Mapping
) -> dict:
    """The params of a host's job: the host's settings, this checkout's commit, the remote
    config, every trace it must bring back with what that trace must carry, and the probe
    results."""
    keys = host_runs(plan, settings["devices"])
    return {
        "host": host,
        "settings": dict(settings),
        "commit": commit,
        "config": remote_config(config, settings["devices"]),
        "traces": {k.trace: plan.trace_expectation(k) for k in keys},
        "probes": list(probe_results),
        "labels": {k.trace: cell_label(k, host) for k in keys},
    }


def sync_checkout(r: Runner, commit: str) -> str:
    """Put the remote checkout at ``commit``; returns its absolute path there. The first
    contact checks that the remote's shell finds the programs the job runs there
    (``commands.remote_tools_check``: git, rsync or ``rsync_path``) before it makes
    anything; refuses a host that lacks one (naming it and the host), and a remote working
    tree with uncommitted changes to tracked files."""
    path = r.settings["path"]
    line = (
        f"{remote_tools_check(r.settings)} && "
        f"mkdir -p {quote_path(path)} && cd {quote_path(path)} && "
        "{ test -e .git || git init -q; } && pwd -P"
    )
    proc = r.ssh(line, "connect", check=False)
    if proc.returncode == 255:
        raise RemoteError(r.host, "connect", f"unreachable: {last_lines(proc.stdout)}")
    lacking = [
        x[len(MISSING_THERE) :].strip()
        for x in proc.stdout.splitlines()
        if x.startswith(MISSING_THERE)
    ]
    if proc.returncode != 0 and lacking:
        raise RemoteError(
            r.host,
            "connect",
            f"its shell over ssh finds no {', '.join(lacking)} there (a non-interactive "
            "ssh session's PATH): install it there, or name rsync's program with "
            "rsync_path; nothing was run there",
        )
    if proc.returncode != 0:
        raise RemoteError(
            r.host, "connect", f"cannot make a checkout at {path}: {last_lines(proc.stdout)}"
        )
    # the last line, exactly: a folder's name may end in a space
    lines = proc.stdout.splitlines()
    if not lines or not lines[-1].startswith("/"):
        raise RemoteError(
            r.host, "connect", f"no absolute path came back for {path}: {last_lines(proc.stdout)}"
        )
    abs_path = lines[-1]
    status = r.ssh(
        in_checkout(abs_path, "git status --porcelain --untracked-files=no"), "status"
    ).stdout
    if status.strip():
        raise RemoteError(
            r.host,
            "status",
            f"the checkout {abs_path} has uncommitted changes ({last_lines(status, 3)}); "
            "commit or stash them there; nothing was run",
        )
    has = r.ssh(
        in_checkout(abs_path, shell_line("git", "cat-file", "-e", f"{commit}^{{commit}}")),
        "has-commit",
        check=False,
    )
    if has.returncode != 0:
        # scp-like, not ssh://: git would percent-decode a URL's path ("%20" a space); git
        # quotes the path in the command its ssh runs there
        url = f"{r.settings['ssh']}:{abs_path}"
        env_ssh = shlex.join(["ssh", *ssh_options(r.settings)])  # git runs it with sh
        r.run(
            [
                "git",
                "-c",
                f"core.sshCommand={env_ssh}",
                "push",
                "--quiet",
                "--force",
                url,
                f"{commit}:{SYNC_REF}",
            ],
            "push",
        )
    head = r.ssh(
        in_checkout(abs_path, "git rev-parse HEAD 2>/dev/null || true"), "head", capture=True
    ).stdout.strip()
    if head != commit:
        r.ssh(
            in_checkout(abs_path, shell_line("git", "checkout", "--quiet", "--detach", commit)),
            "checkout",
        )
    return abs_path


def run_remote(r: Runner, abs_path: str, job: FetchJob) -> subprocess.CompletedProcess:
    """Write the config there, bootstrap, run the device targets (not raising: what it
    finished is brought back either way)."""
    import yaml

    r.ssh(
        in_checkout(abs_path, f"mkdir -p results && cat > {shlex.quote(REMOTE_CONFIG)}"),
        "config",
        input=yaml.safe_dump(job.config, sort_keys=True),
    )
    env = env_prefix(job.settings)
    if job.settings.get("bootstrap", True):
        r.ssh(in_checkout(abs_path, env + "scripts/dev/bootstrap"), "bootstrap")
    cores = str(job.settings.get("cores", "all"))
    # the targets first: --configfile takes every word after it
    line = env + shell_line(
        ".venv/bin/snakemake",
        *job.settings["devices"],
        "--cores",
        cores,
        "--configfile",
        REMOTE_CONFIG,
    )
    return r.ssh(in_checkout(abs_path, line), "snakemake", check=False)


def fetch(r: Runner, abs_path: str, job: FetchJob, dest: str) -> tuple[int, str]:
    """rsync the job's files into ``dest``; returns (rsync's exit status, its output)."""
    rels = [str(Path(p).relative_to("results")) for p in [*job.traces, *job.probes]]
    Path(dest).mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", suffix=".files", delete=False) as f:
        f.write("\n".join(sorted(rels)) + "\n")
        files_from = f.name
    try:
        proc = r.run(
            rsync_argv(job.settings, abs_path, files_from, str(Path(dest).resolve())),
            "rsync",
            check=False,
            env=rsync_env(),
        )
    finally:
        Path(files_from).unlink(missing_ok=True)
    return proc.returncode, proc.stdout


def remote_fetch(params: Mapping, manifest: str, log: logging.Logger, basedir: str) -> dict:
    """A host's job (see the module docstring). Writes the manifest on success; on failure
    writes ``status.json`` naming the stage and the missing cells and raises
    :class:`RemoteError`."""
    job = FetchJob(**params)
    status_path = REMOTE_STATUS.format(host=job.host)
    r = Runner(job.host, job.settings, log, basedir)
    Path(REMOTE_DIR.format(host=job.host)).mkdir(parents=True, exist_ok=True)
    lacking = local_tool_problem(job.host)
    if lacking:
        # before any remote work: the job would otherwise run everything there first
        e = RemoteError(job.host, "local-tools", lacking.removeprefix(f"remote {job.host}: "))
        _record_failure(job, e, status_path, manifest)
        log.error("%s", e)
        raise e
    changed = source_change_problem(job.host, basedir, job.commit)
    if changed:
        e = RemoteError(job.host, "local-changes", changed.removeprefix(f"remote {job.host}: "))
        _record_failure(job, e, status_path, manifest)
        log.error("%s", e)
        raise e
    local_changes = r.run(
        ["git", "-C", basedir, "status", "--porcelain", "--untracked-files=no"],
        "local-status",
        capture=True,
    ).stdout.strip()
    if local_changes:
        log.warning(
            "this checkout has uncommitted changes (%s): the remote runs commit %s without them",
            last_lines(local_changes, 3),
            job.commit[:12],
        )
    try:
        abs_path = sync_checkout(r, job.commit)
        described = describe_host(r, abs_path)
        proc = run_remote(r, abs_path, job)
        failed_remote = proc.returncode != 0
        code, out = fetch(r, abs_path, job, REMOTE_DIR.format(host=job.host))
        good, missing = verify(job, described)
        if code not in (0, 23, 24):  # 23/24: some files missing on the remote
            raise RemoteError(
                job.host,
                "rsync",
                f"the transfer stopped (rsync exit {code}: {last_lines(out, 2)}); files "
                "not yet complete wait in .rsync-partial folders and are never read; rerun "
                "to resume",
                missing,
            )
        if missing:
            why = (
                "its snakemake run failed"
                if failed_remote
                else "they did not come back whole, or were made on another machine"
            )
            raise RemoteError(
                job.host,
                "snakemake" if failed_remote else "rsync",
                f"{len(missing)} cells are missing ({why}; see {REMOTE_LOG.format(host=job.host)}"
                f"): {'; '.join(missing)}",
                missing,
            )
        if failed_remote:
            # every trace and probe result is here and whole: what failed there made none
            # of them (a figure, a table), so the comparisons here are complete
            log.warning(
                "remote %s: its snakemake run failed, but every file this host compares came "
                "back whole; see the snakemake output above",
                job.host,
            )
    except RemoteError as e:
        _record_failure(job, e, status_path, manifest)
        log.error("%s", e)
        raise
    record = {
        "host": job.host,
        "ssh": job.settings["ssh"],
        "path": abs_path,
        "commit": job.commit,
        "local_changes": bool(local_changes),
        "remote_run_failed": failed_remote,
        "remote": described,
        "devices": list(job.settings["devices"]),
        "transferred": transferred(out),
        "files": {p: good[p] for p in sorted(good)},
    }
    Path(status_path).unlink(missing_ok=True)
    write_text_atomic(manifest, json.dumps(record, indent=1, sort_keys=True) + "\n")
    log.info(
        "remote %s: %d files here, %s copied this time", job.host, len(good), record["transferred"]
    )
    return record


def _record_failure(job: FetchJob, e: RemoteError, status_path: str, manifest: str) -> None:
    """A failed attempt: the manifest removed (what an earlier run recorded as good is not,
    or no longer known to be), ``status.json`` written with the stage, the error and the
    missing cells (every trace not here when ``e`` names none)."""
    Path(manifest).unlink(missing_ok=True)
    if not e.missing:
        e.missing = [
            job.labels.get(p, p) for p in job.traces if not Path(remote_file(job.host, p)).is_file()
        ]
    Path(status_path).parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(
        status_path,
        json.dumps(
            {"host": job.host, "stage": e.stage, "error": str(e), "missing": e.missing},
            indent=1,
        ),
    )


# ----- after a failed run -------------------------------------------------------------------


def failed_hosts_report(
    hosts: Mapping[str, Mapping], labels: Mapping[str, Mapping[str, str]]
) -> list[dict]:
    """One row per cell of a host without a current manifest: host, cell, stage, error
    (from the host's ``status.json`` when its job failed, :func:`host_status`), log."""
    rows = []
    for host in hosts:
        # a host whose job finished, or that no run has tried yet (its folder is made by
        # its job's first step), is not reported
        status = host_status(host)
        if status is None or not Path(REMOTE_DIR.format(host=host)).is_dir():
            continue
        missing = [
            lab
            for p, lab in labels.get(host, {}).items()
            if not Path(remote_file(host, p)).is_file()
        ]
        for cell in missing or ["(every cell came back; its job did not finish)"]:
            rows.append({"host": host, "cell": cell, **status})
    return rows


def write_failed_hosts(rows: Sequence[Mapping], out: str = paths.REMOTE_PARTIAL) -> str:
    """Write the rows of :func:`failed_hosts_report` as CSV; returns a message for
    stderr naming each host and its missing cells."""
    import csv
    import io

    buf = io.StringIO()
    w = csv.DictWriter(buf, ["host", "cell", "stage", "error", "log"], lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    write_text_atomic(out, buf.getvalue())
    by_host: dict[str, list[str]] = {}
    for row in rows:
        by_host.setdefault(row["host"], []).append(row["cell"])
    lines = [f"remote hosts without results (written to {out}):"]
    for host, cells in by_host.items():
        lines.append(f"  {host}: {len(cells)} cells missing: {'; '.join(cells)}")
    return "\n".join(lines)
