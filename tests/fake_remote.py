"""A fake remote host for the remote job's commands: a fake ``ssh`` first on the PATH that
records what it was asked to run and runs it with ``sh -c`` in a fake home folder, as
OpenSSH's server runs a command with the user's shell. rsync (whose ``-e`` names ssh) and
git (whose ``core.sshCommand`` does) reach it too, and the real rsync and git run at both
ends, so every word the remote shell reads is read by a real shell.

The "checkout here" is a small git repository whose commit the job pushes there: its
``scripts/dev/bootstrap`` and ``.venv/bin/snakemake`` are fakes that record their
arguments and environment (``results/fake-*.json`` there) and put the prepared results
(``prepared/``, committed) under the remote's ``results/``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

#: The fake ssh: OpenSSH's option parsing (options with an argument), the destination,
#: then every further word joined by spaces into the one command line the remote shell reads.
FAKE_SSH = """#!{python}
import json, os, sys
args, opts, i = sys.argv[1:], [], 0
while i < len(args):
    a = args[i]
    if a == "--":
        i += 1
        break
    if a.startswith("-") and len(a) > 1:
        if a[1] in "BbcDEeFIiJLlmOopQRSWw" and len(a) == 2:
            opts += [a, args[i + 1]]
            i += 2
        else:
            opts.append(a)
            i += 1
        continue
    break
command = " ".join(args[i + 1 :])
with open({log!r}, "a") as f:
    f.write(json.dumps({{"opts": opts, "dest": args[i], "command": command}}) + "\\n")
os.chdir({home!r})
os.execve("/bin/sh", ["sh", "-c", command], {{**os.environ, "HOME": {home!r}}})
"""

#: A fake tool of the checkout: records its argv and environment in results/fake-<name>.json
#: (there), and (snakemake) copies the prepared results into results/ once.
FAKE_TOOL = """#!{python}
import json, os, shutil, sys
os.makedirs("results", exist_ok=True)
with open("results/fake-{name}.json", "w") as f:
    json.dump({{"argv": sys.argv[1:], "env": dict(os.environ)}}, f)
if {copy!r}:
    for root, _, files in os.walk("prepared"):
        for name in files:
            src = os.path.join(root, name)
            dst = os.path.join("results", os.path.relpath(src, "prepared"))
            if not os.path.exists(dst):
                os.makedirs(os.path.dirname(dst), exist_ok=True)
                shutil.copy2(src, dst)
"""

#: A program at an odd path that records that it ran, as what, then is rsync.
RSYNC_WRAPPER = """#!/bin/sh
printf '%s\\n' "$0" >> {marker}
exec rsync "$@"
"""


def git(*argv: str, cwd: Path) -> str:
    """Run git in ``cwd`` with a fixed identity; returns its stdout."""
    proc = subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@localhost", *argv],
        cwd=cwd,
        check=True,
        capture_output=True,
        text=True,
    )
    return proc.stdout.strip()


class FakeRemote:
    """The fake host (``home``, its ssh log) and the checkout here (``here``, a git
    repository with the fake tools and ``prepared/`` results) under ``root``."""

    def __init__(self, root: Path):
        self.root = root
        self.bin = root / "bin"
        self.home = root / "home"
        self.log = root / "ssh-log.jsonl"
        self.here = root / "here"
        for d in (self.bin, self.home, self.here):
            d.mkdir(parents=True)
        ssh = self.bin / "ssh"
        text = FAKE_SSH.format(python=sys.executable, log=str(self.log), home=str(self.home))
        ssh.write_text(text)
        ssh.chmod(0o755)

    def path_env(self) -> str:
        """A PATH with the fake ssh first."""
        return f"{self.bin}{os.pathsep}{os.environ['PATH']}"

    def make_checkout(self, prepared: dict[str, bytes]) -> str:
        """Commit the fake tools and ``prepared`` (path under results/ → bytes) here;
        returns the commit."""
        for name, rel, copy in (
            ("bootstrap", "scripts/dev/bootstrap", False),
            ("snakemake", ".venv/bin/snakemake", True),
        ):
            tool = self.here / rel
            tool.parent.mkdir(parents=True, exist_ok=True)
            tool.write_text(FAKE_TOOL.format(python=sys.executable, name=name, copy=copy))
            tool.chmod(0o755)
        for rel, data in prepared.items():
            p = self.here / "prepared" / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(data)
        git("init", "-q", cwd=self.here)
        git("add", "-A", "-f", ".", cwd=self.here)
        git("commit", "-q", "-m", "the checkout here", cwd=self.here)
        return git("rev-parse", "HEAD", cwd=self.here)

    def rsync_wrapper(self, folder: str) -> tuple[Path, Path]:
        """An rsync program in ``folder`` (under root; any name) and the file it marks
        each run in: (program, marker)."""
        d = self.root / folder
        d.mkdir(parents=True)
        marker = self.root / "rsync-ran.txt"
        program = d / "my rsync"
        program.write_text(RSYNC_WRAPPER.format(marker=_sh_quote(str(marker))))
        program.chmod(0o755)
        return program, marker

    def calls(self) -> list[dict]:
        """Every ssh the job started: ``{"opts", "dest", "command"}``."""
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]

    def recorded(self, checkout: Path, name: str) -> dict:
        """What fake tool ``name`` recorded in the remote checkout: ``{"argv", "env"}``."""
        return json.loads((checkout / "results" / f"fake-{name}.json").read_text())


def _sh_quote(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"
