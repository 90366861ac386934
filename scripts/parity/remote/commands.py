"""The commands of a remote host's job: the ssh and rsync argument lists built from the
host's config (every value one argument of an argument list; the one command line the
remote shell reads built with :func:`shlex.quote`), and :class:`Runner`, which runs them,
logs each command and its output, and raises :class:`RemoteError` naming the host and
the stage. The job that runs them in order is ``parity.remote.fetch``.

Transport and credentials are OpenSSH's and rsync's: the config names a destination
(``user@host`` or an ``ssh_config`` alias), optionally a port, an identity file and an
``ssh_config`` file.
"""

from __future__ import annotations

import logging
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
    transfer is (``--delay-updates``), statistics for the log."""
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
        argv.append(f"--rsync-path={host['rsync_path']}")
    return [*argv, "--", f"{host['ssh']}:{remote_path.rstrip('/')}/results/", dest + "/"]


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
    ) -> subprocess.CompletedProcess:
        """Run ``argv`` (a local program and its arguments) in the workflow folder with
        ``input`` on its standard input; its output (stdout and stderr together, text) is
        logged unless ``capture``. Raises :class:`RemoteError` for ``stage`` when it exits
        non-zero and ``check``."""
        self.log.info("%s: %s", stage, shlex.join(argv))
        proc = subprocess.run(
            list(argv),
            input=input,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            cwd=self.basedir,
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
