"""A throw-away OpenSSH server on 127.0.0.1, for tests/test_remote.py.

Debian's ``openssh-server`` and ``rsync``, installed with apt when missing (root only), and
every file of the server in one temporary folder: its own ``sshd_config``, a fresh host key
and user key, ``authorized_keys``, ``known_hosts`` and a client ``ssh_config`` with one host
alias. The system's ssh configuration is never read or written (``sshd -f`` and
``ssh -F`` name the folder's files); the one system path touched is ``/run/sshd``, the
privilege-separation folder sshd requires (made when missing, as the package's init script
makes it).

``sshd -D`` runs as a child of this process; :meth:`LocalSshd.stop` ends it (and its
connection processes, which are its children). The folder is removed on stop.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

SBIN = ("/usr/sbin", "/sbin", "/usr/bin", "/bin")
PACKAGES = {
    "sshd": "openssh-server",
    "ssh": "openssh-client",
    "ssh-keygen": "openssh-client",
    "rsync": "rsync",
}


def find(program: str) -> str | None:
    return shutil.which(program) or shutil.which(program, path=os.pathsep.join(SBIN))


def missing_packages() -> list[str]:
    return sorted({pkg for prog, pkg in PACKAGES.items() if find(prog) is None})


def install_reason() -> str | None:
    """Install openssh-server and rsync when missing (root with apt); why they are still
    missing, or None."""
    missing = missing_packages()
    if not missing:
        return None
    if not hasattr(os, "geteuid") or os.geteuid() != 0 or find("apt-get") is None:
        return f"{', '.join(missing)} missing and not installable here (needs root and apt)"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for argv in (
        ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing],
        ["apt-get", "update", "-qq"],
        ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing],
    ):
        proc = subprocess.run(argv, env=env, capture_output=True, text=True)
        if argv[1] == "install" and proc.returncode == 0:
            break
    still = missing_packages()
    if still:
        return f"could not install {', '.join(still)} with apt-get: {proc.stderr.strip()[-500:]}"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class SshdStartError(RuntimeError):
    """sshd did not come up; the message carries its log."""


class LocalSshd:
    """sshd on 127.0.0.1 with throw-away keys in a temporary folder; :attr:`alias` is the
    ssh destination and :attr:`ssh_config` the client config to reach it."""

    alias = "paritytest"

    def __init__(self):
        self.dir = Path(tempfile.mkdtemp(prefix="parity-sshd-"))
        self.port = _free_port()
        self.proc: subprocess.Popen | None = None
        self.ssh_config = self.dir / "ssh_config"
        self.log = self.dir / "sshd.log"

    def _keygen(self, name: str) -> Path:
        key = self.dir / name
        subprocess.run(
            [find("ssh-keygen"), "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(key)],
            check=True,
        )
        return key

    def start(self) -> None:
        host_key, user_key = self._keygen("host_key"), self._keygen("user_key")
        (self.dir / "authorized_keys").write_text(Path(f"{user_key}.pub").read_text())
        known = Path(f"{host_key}.pub").read_text().split()[:2]
        (self.dir / "known_hosts").write_text(f"[127.0.0.1]:{self.port} {' '.join(known)}\n")
        (self.dir / "sshd_config").write_text(
            "\n".join(
                [
                    f"Port {self.port}",
                    "ListenAddress 127.0.0.1",
                    f"HostKey {host_key}",
                    f"PidFile {self.dir / 'sshd.pid'}",
                    f"AuthorizedKeysFile {self.dir / 'authorized_keys'}",
                    "PubkeyAuthentication yes",
                    "PasswordAuthentication no",
                    "KbdInteractiveAuthentication no",
                    "PermitRootLogin prohibit-password",
                    "StrictModes no",
                    "UsePAM no",
                    "LogLevel ERROR",
                    "",
                ]
            )
        )
        self.ssh_config.write_text(
            "\n".join(
                [
                    f"Host {self.alias}",
                    "  HostName 127.0.0.1",
                    f"  Port {self.port}",
                    f"  User {os.environ.get('USER') or 'root'}",
                    f"  IdentityFile {user_key}",
                    "  IdentitiesOnly yes",
                    f"  UserKnownHostsFile {self.dir / 'known_hosts'}",
                    "  StrictHostKeyChecking yes",
                    "  BatchMode yes",
                    "",
                ]
            )
        )
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                [find("sshd"), "-D", "-e", "-f", str(self.dir / "sshd_config")],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SshdStartError(f"sshd exited ({self.proc.returncode}):\n{self.logs()}")
            if self.ssh("true").returncode == 0:
                return
            time.sleep(0.3)
        raise SshdStartError(f"sshd did not answer within 15 s:\n{self.logs()}")

    def ssh(self, *command: str) -> subprocess.CompletedProcess:
        """Run a command there (its words joined by ssh, as ssh does)."""
        return subprocess.run(
            [find("ssh"), "-F", str(self.ssh_config), self.alias, *command],
            capture_output=True,
            text=True,
            timeout=60,
        )

    def logs(self) -> str:
        try:
            return self.log.read_text(errors="replace")[-4000:]
        except OSError as e:
            return f"(no sshd log: {e})"

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if not os.environ.get("PARITY_KEEP_SSHD_DIR"):
            shutil.rmtree(self.dir, ignore_errors=True)
