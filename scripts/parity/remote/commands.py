"""The commands of a remote host's job: the ssh, rsync and git argument lists built from
the host's config, and :class:`Runner`, which runs them (never through a local shell),
logs each command and its output, and raises :class:`RemoteError` naming the host and
the stage. The job that runs them in order is ``parity.remote.fetch``.

Transport and credentials are OpenSSH's and rsync's: the config names a destination
(``user@host`` or an ``ssh_config`` alias), optionally a port, an identity file and an
``ssh_config`` file.

Every config value reaches a program as one word. Locally it is one argument of an
argument list. Where a remote shell reads it, it is quoted with :func:`shlex.quote`: the
command line ssh runs there (:func:`shell_line`, :func:`quote_path`, :func:`env_prefix`),
rsync's remote path and ``--rsync-path`` (:func:`rsync_argv`, run with :func:`rsync_env`);
the ssh command that rsync's ``-e`` and git's ``core.sshCommand`` name is a line of
quoted words too, which rsync splits by the same quotes and git hands to ``sh``. What
cannot travel as one word (a control character, a destination that is not a host name) is
refused by the config schema before any job runs (``schemas/config.schema.yaml``).
"""

from __future__ import annotations

import logging
import os
import re
import shlex
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

#: rsync's folder for files not yet complete (in each destination folder).
PARTIAL_DIR = ".rsync-partial"


class RemoteError(RuntimeError):
    """A remote step failed; the message names the host and what to do."""

    def __init__(self, host: str, stage: str, message: str, missing: Sequence[str] = ()):
        self.host, self.stage, self.missing = host, stage, list(missing)
        super().__init__(f"remote {host}: {message}")


#: The programs a remote host's job runs here, and what each is for: every step goes over
#: ``ssh`` (rsync's ``-e`` and git's ``core.sshCommand`` name it too), ``git`` pushes the
#: commit and reads this checkout's state, ``rsync`` brings the results back. Checked
#: before any remote work (:func:`local_tool_problem`).
LOCAL_TOOLS = {
    "ssh": "it runs every command there and carries git's push and rsync's transfer",
    "git": "it reads this checkout's commit and pushes it to the remote checkout",
    "rsync": "it brings the host's results back here",
}


def local_tool_problem(host: str, environ: Mapping[str, str] | None = None) -> str | None:
    """Why remote host ``host``'s job cannot run from this machine: one line naming each
    program of :data:`LOCAL_TOOLS` that is not on this machine's ``PATH`` (``environ``'s,
    default this process's), what it is for, and the host; None when every one is there.
    Nothing is run."""
    import shutil

    env = os.environ if environ is None else environ
    path = env.get("PATH", os.defpath)
    missing = [
        f"{tool} is not on this machine's PATH ({what})"
        for tool, what in LOCAL_TOOLS.items()
        if shutil.which(tool, path=path) is None
    ]
    if not missing:
        return None
    return (
        f"remote {host}: {'; '.join(missing)}: install it here or put it on PATH; "
        "nothing was run there"
    )


def source_change_problem(host: str, basedir: str | os.PathLike, commit: str) -> str | None:
    """Why remote host ``host`` cannot run checkout ``basedir``: one line naming the first
    few files that feed a runner's source id (``parity.plan.builds.RUST_PATTERNS`` under
    ``rust/``) and differ from commit ``commit`` (modified, staged, deleted or untracked),
    since the remote builds the commit and every trace it makes would be refused here as
    another build's; None when there are none (or git cannot say). Runs ``git status``."""
    import fnmatch
    import subprocess

    from parity.plan.builds import RUST_PATTERNS

    try:
        proc = subprocess.run(
            [
                "git",
                "-C",
                str(basedir),
                "status",
                "--porcelain",
                "--untracked-files=all",
                "--",
                "rust",
            ],
            capture_output=True,
            text=True,
        )
    except FileNotFoundError:
        return None
    if proc.returncode != 0:
        return None
    changed = []
    for line in proc.stdout.splitlines():
        name = line[3:].split(" -> ")[-1].strip('"')
        rel = name.removeprefix("rust/")
        if any(
            fnmatch.fnmatch(rel, pat) or fnmatch.fnmatch(rel, pat.replace("**/", ""))
            for pat in RUST_PATTERNS
        ):
            changed.append(name)
    if not changed:
        return None
    shown = ", ".join(changed[:3]) + (f" and {len(changed) - 3} more" if len(changed) > 3 else "")
    return (
        f"remote {host}: uncommitted changes to files the runners are built from ({shown}): "
        f"the remote builds commit {commit[:12]} without them and every trace it made would be "
        "refused as another build's; commit them first; nothing was run there"
    )


#: What the first contact with a host checks there (the programs its non-interactive
#: shell must find: ``git`` for the checkout and git's push, which runs
#: ``git-receive-pack`` there; rsync's program, ``rsync`` or the config's ``rsync_path``,
#: for the transfer). Prefix of the line the remote prints for one that is missing.
MISSING_THERE = "parity-missing-tool:"


def settings_paths(name: str, host: Mapping[str, Any]) -> None:
    """Refuse remote host ``name``'s ``identity`` (a readable file) and ``ssh_config`` (a
    readable file, or a character device such as ``/dev/null``) when they are not there,
    a leading ``~`` expanded as ssh does. Raises ``ConfigError`` at
    ``remote.<name>.identity`` / ``remote.<name>.ssh_config`` naming the path. Nothing is
    run."""
    import stat as _stat

    from parity.core import userpath

    for key in ("identity", "ssh_config"):
        given = host.get(key)
        if not given:
            continue
        full = os.path.expanduser(str(given))
        if key == "ssh_config":
            try:
                if _stat.S_ISCHR(os.stat(full).st_mode):
                    continue
            except OSError:
                pass
        userpath.check(f"remote.{name}.{key}", full, "file")


def remote_tools_check(host: Mapping[str, Any]) -> str:
    """A command line for the remote shell that prints ``parity-missing-tool: <program>``
    for each program the host's job runs there without its ``env`` (``git``, and
    ``rsync_path`` or ``rsync``) that its shell cannot find, and exits 3 if any is
    missing (0 otherwise). Cheap: ``command -v`` only."""
    tools = ["git", host.get("rsync_path") or "rsync"]
    checks = " ".join(shlex.quote(t) for t in tools)
    return (
        f"missing=0; for t in {checks}; do "
        'case "$t" in */*) test -f "$t" && test -x "$t";; '
        '*) command -v "$t" >/dev/null 2>&1;; esac || '
        f"{{ printf '%s %s\\n' {shlex.quote(MISSING_THERE)} \"$t\"; missing=1; }}; done; "
        'test "$missing" = 0 || exit 3'
    )


def ssh_options(host: Mapping[str, Any]) -> list[str]:
    """ssh's options for a host (no destination): batch mode (never a password prompt),
    a connect timeout, and the config's ``ssh_config``, ``port`` and ``identity``."""
    opts = ["-o", "BatchMode=yes", "-o", "ConnectTimeout=20", "-o", "ServerAliveInterval=15"]
    if host.get("ssh_config"):
        opts += ["-F", str(Path(host["ssh_config"]).expanduser())]
    if host.get("port"):
        opts += ["-p", str(int(host["port"]))]
    if host.get("identity"):
        opts += ["-i", str(Path(host["identity"]).expanduser()), "-o", "IdentitiesOnly=yes"]
    return opts


def ssh_argv(host: Mapping[str, Any], command: str) -> list[str]:
    """``ssh [options] -- destination command``: ``command`` is the one line the remote
    shell reads (build it with :func:`shell_line`)."""
    return ["ssh", *ssh_options(host), "--", host["ssh"], command]


def quote_path(path: str) -> str:
    """A remote path for the remote shell: quoted, with a leading ``~/`` left to the shell
    as ``"$HOME"/…``."""
    if path == "~":
        return '"$HOME"'
    if path.startswith("~/"):
        return '"$HOME"/' + shlex.quote(path[2:])
    return shlex.quote(path)


def shell_line(*words: str) -> str:
    """One command line, every word quoted."""
    return " ".join(shlex.quote(w) for w in words)


def env_prefix(host: Mapping[str, Any]) -> str:
    """``env NAME=value …`` for the host's ``env`` settings (quoted), or ``""``."""
    env = host.get("env") or {}
    if not env:
        return ""
    return shell_line("env", *(f"{k}={v}" for k, v in sorted(env.items()))) + " "


def in_checkout(path: str, line: str) -> str:
    """``cd <path> && <line>``: ``line`` run in the remote checkout."""
    return f"cd {quote_path(path)} && {line}"


def rsync_argv(host: Mapping[str, Any], remote_path: str, files_from: str, dest: str) -> list[str]:
    """rsync pulling the listed files (relative to the remote's ``results/``) into
    ``dest``: times kept, files not yet complete in :data:`PARTIAL_DIR` until the whole
    transfer is (``--delay-updates``), statistics for the log.

    Three of its values reach the remote shell: the remote path and ``--rsync-path`` (which
    rsync puts into the command it asks ssh to run there) are quoted with
    :func:`shlex.quote`, and ``-e`` is a quoted line that rsync splits itself. Run it with
    :func:`rsync_env`, which stops a newer rsync from escaping the quoted path again."""
    argv = [
        "rsync",
        "--recursive",
        "--times",
        "--itemize-changes",
        "--stats",
        f"--partial-dir={PARTIAL_DIR}",
        "--delay-updates",
        f"--files-from={files_from}",
        "-e",
        shlex.join(["ssh", *ssh_options(host)]),
    ]
    if host.get("bwlimit"):
        argv.append(f"--bwlimit={int(host['bwlimit'])}")
    if host.get("rsync_path"):
        argv.append(f"--rsync-path={shlex.quote(host['rsync_path'])}")
    there = shlex.quote(remote_path.rstrip("/") + "/results/")
    return [*argv, "--", f"{host['ssh']}:{there}", dest + "/"]


def rsync_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of :func:`rsync_argv`'s rsync: ``environ`` (default this process's)
    with rsync's own argument protection off, so that the remote shell reads the remote
    path exactly as :func:`shlex.quote` wrote it. rsync 3.2.4 and later backslash-escape
    a remote path unless ``RSYNC_OLD_ARGS`` is set (older ones ignore it, and send it as
    given); ``RSYNC_PROTECT_ARGS`` of the user's environment would send it past the shell,
    quotes and all."""
    env = dict(os.environ if environ is None else environ)
    env["RSYNC_OLD_ARGS"] = "2"
    env["RSYNC_PROTECT_ARGS"] = "0"
    return env


def transferred(stats: str) -> int | None:
    """Files rsync copied, from its ``--stats`` output (None when it printed none)."""
    m = re.search(r"Number of regular files transferred: ([\d,]+)", stats)
    return int(m.group(1).replace(",", "")) if m else None


class Runner:
    """Runs the steps of one host, logging each command and its output."""

    def __init__(self, host: str, settings: Mapping, log: logging.Logger, basedir: str):
        self.host, self.settings, self.log, self.basedir = host, settings, log, basedir

    def run(
        self,
        argv: Sequence[str],
        stage: str,
        input: str | None = None,
        check: bool = True,
        capture: bool = False,
        env: Mapping[str, str] | None = None,
    ) -> subprocess.CompletedProcess:
        """Run ``argv`` (a local program and its arguments, no shell) in the workflow folder
        with ``input`` on its standard input and ``env`` as its environment (default this
        process's); its output (stdout and stderr together, text) is logged unless
        ``capture``. Raises :class:`RemoteError` for ``stage`` when it exits non-zero and
        ``check``."""
        self.log.info("%s: %s", stage, shlex.join(argv))
        proc = subprocess.run(
            list(argv),
            input=input,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            cwd=self.basedir,
            env=None if env is None else dict(env),
        )
        if proc.stdout and not capture:
            self.log.info("%s output:\n%s", stage, proc.stdout.rstrip())
        if check and proc.returncode != 0:
            raise RemoteError(
                self.host,
                stage,
                f"{stage} failed (exit {proc.returncode}): {last_lines(proc.stdout)}",
            )
        return proc

    def ssh(self, line: str, stage: str, **kw) -> subprocess.CompletedProcess:
        """Run the one command ``line`` on the host over ssh (:func:`ssh_argv`), as
        :meth:`run` runs a local program (``kw``: its ``input``, ``check``, ``capture``)."""
        return self.run(ssh_argv(self.settings, line), stage, **kw)


def last_lines(text: str, n: int = 5) -> str:
    """The last ``n`` non-blank lines of a command's output, joined by `` | `` (for an
    error message), or ``(no output)``."""
    lines = [x for x in (text or "").strip().splitlines() if x.strip()]
    return " | ".join(lines[-n:]) or "(no output)"
