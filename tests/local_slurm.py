"""A throw-away single-node Slurm on this machine, for tests/test_slurm.py.

Debian's ``slurm-wlm`` (Slurm 22.05) and ``munge``, configured here from nothing: every
file (munge key and socket, slurm.conf, state, spool, logs, pid files) lives in one
temporary folder, and the daemons listen on free ports, so the cluster touches nothing
system-wide and two of them can run side by side. What works, as found by hand:

* a fresh ``munge.key`` owned by the munge user, mode 400, and ``munged`` run as that user;
* ``slurmctld`` and ``slurmd`` run as root with ``SlurmUser=root``,
  ``ProctrackType=proctrack/linuxproc``, ``TaskPlugin=task/none`` (no cgroups needed),
  ``SelectType=select/cons_tres`` and no accounting at all (no slurmdbd, so ``sacct``
  never answers: clients must query ``squeue``);
* one node named as ``hostname -s`` with ``CPUs`` = the CPUs this process may use, one
  default partition.

The daemons run in the foreground as children of this process, so :meth:`LocalSlurm.stop`
ends exactly what :meth:`LocalSlurm.start` started (it cancels the cluster's jobs first).

Clients find the cluster through ``SLURM_CONF`` (see :meth:`LocalSlurm.env`), with one
exception: inside a job, snakemake-executor-plugin-slurm-jobstep 0.6.1 starts the job's
``srun`` with every ``SLURM_*`` variable but the job's identity removed, ``SLURM_CONF``
included, and an ``srun`` without it looks for /etc/slurm/slurm.conf, then DNS, and
fails. A real cluster keeps its slurm.conf there; this one puts an ``srun`` wrapper that
sets ``SLURM_CONF`` first on the ``PATH`` instead of writing to /etc.

The folder is removed on stop; set ``PARITY_KEEP_SLURM_DIR=1`` to keep it (and its logs)
for a look after a failure.
"""

from __future__ import annotations

import os
import pwd
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import IO, Self

DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("munge", "sbatch", "srun", "squeue", "scontrol", "scancel", "sinfo")
#: Debian puts the daemons in /usr/sbin, which a non-login PATH may lack.
SBIN = ("/usr/sbin", "/sbin", "/usr/bin", "/bin")
INSTALL_HINT = "apt-get install slurm-wlm munge (as root)"


class SlurmStartError(RuntimeError):
    """A daemon did not come up; the message carries the tail of its log."""


def find(program: str) -> str | None:
    """Absolute path of a Slurm or munge program, looking in the sbin folders too."""
    return shutil.which(program) or shutil.which(program, path=os.pathsep.join(SBIN))


def unavailable_reason() -> str | None:
    """Why a local Slurm cannot be started here, or None when it can be tried."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "needs root (munged runs as the munge user, slurmd as root)"
    missing = [p for p in DAEMONS + CLIENTS if find(p) is None]
    if missing:
        return f"{', '.join(missing)} not found; install with: {INSTALL_HINT}"
    try:
        pwd.getpwnam("munge")
    except KeyError:
        return f"no 'munge' user; install with: {INSTALL_HINT}"
    return None


def _free_ports(n: int) -> list[int]:
    """``n`` distinct TCP ports that are free on 127.0.0.1 right now."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _real_memory_mb() -> int:
    """Memory to declare for the node: 90 % of MemTotal (slurmd drains a node that
    declares more than it has)."""
    with open("/proc/meminfo", encoding="ascii") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                return int(int(line.split()[1]) / 1024 * 0.9)
    raise SlurmStartError("MemTotal not found in /proc/meminfo")


def _cpus() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def _tail(path: Path, lines: int = 25) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError as e:
        return f"({path.name}: {e.strerror})"
    return "\n".join(text[-lines:])


class LocalSlurm:
    """A single-node Slurm cluster in a temporary folder; use as a context manager."""

    def __init__(self, cluster_name: str = "paritytest"):
        self.cluster_name = cluster_name
        self.host = socket.gethostname().split(".")[0]  # hostname -s
        self.dir: Path | None = None
        self.procs: dict[str, subprocess.Popen] = {}
        self._outputs: dict[str, IO[bytes]] = {}  # each daemon's stdout file

    # ----- paths --------------------------------------------------------------------

    @property
    def conf(self) -> Path:
        return self.dir / "slurm.conf"

    @property
    def munge_socket(self) -> Path:
        return self.dir / "munge" / "munge.socket"

    def log(self, daemon: str) -> Path:
        """Log file of ``munged``, ``slurmctld`` or ``slurmd``."""
        return self.dir / "log" / f"{daemon}.log"

    def env(self) -> dict[str, str]:
        """The environment for Slurm clients (sbatch, squeue, …) of this cluster."""
        env = dict(os.environ, SLURM_CONF=str(self.conf))
        # The srun wrapper first; the daemons may sit in sbin folders a plain PATH lacks.
        path = [str(self.dir / "bin"), env.get("PATH", ""), *SBIN]
        env["PATH"] = os.pathsep.join(p for p in path if p)
        return env

    def run(self, *cmd: str, timeout: float = 30) -> subprocess.CompletedProcess:
        """Run a Slurm client against this cluster (stdout and stderr captured)."""
        return subprocess.run(
            [find(cmd[0]) or cmd[0], *cmd[1:]],
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def logs(self) -> str:
        """The tail of every daemon's log, for a failure message."""
        if self.dir is None:
            return "(no cluster folder)"
        return "\n".join(f"--- {d}.log ---\n{_tail(self.log(d))}" for d in DAEMONS)

    # ----- start ----------------------------------------------------------------------

    def start(self) -> Self:
        """Start munged, slurmctld and slurmd; raise SlurmStartError (after stopping what
        did start) when one does not come up."""
        reason = unavailable_reason()
        if reason:
            raise SlurmStartError(reason)
        self.dir = Path(tempfile.mkdtemp(prefix="parity-slurm-"))
        self.dir.chmod(0o755)  # the munge user must reach its folder inside
        for sub in ("bin", "state", "spool", "log"):
            (self.dir / sub).mkdir()
        try:
            self._start_munge()
            self._write_conf()
            self._write_srun_wrapper()
            self._start_daemon("slurmctld", [find("slurmctld"), "-D", "-f", str(self.conf)])
            self._wait("slurmctld", self._controller_up, 30)
            self._start_daemon(
                "slurmd", [find("slurmd"), "-D", "-f", str(self.conf), "-N", self.host]
            )
            self._wait("slurmd", self._node_idle, 60)
        except BaseException:
            self.stop()
            raise
        return self

    def _start_munge(self):
        munge = pwd.getpwnam("munge")
        d = self.dir / "munge"
        d.mkdir()
        d.chmod(0o755)  # munged insists that everybody may reach its socket
        os.chown(d, munge.pw_uid, munge.pw_gid)
        key = d / "munge.key"
        key.write_bytes(os.urandom(1024))
        os.chown(key, munge.pw_uid, munge.pw_gid)
        key.chmod(0o400)
        log = self.log("munged")
        log.touch()
        os.chown(log, munge.pw_uid, munge.pw_gid)
        cmd = [
            find("munged"),
            "--foreground",
            f"--key-file={key}",
            f"--socket={self.munge_socket}",
            f"--pid-file={d / 'munged.pid'}",
            f"--seed-file={d / 'munged.seed'}",
            f"--log-file={log}",
        ]
        self._start_daemon("munged", cmd, user=munge.pw_uid, group=munge.pw_gid)
        self._wait("munged", self._munge_answers, 15)

    def _write_conf(self):
        ctld_port, slurmd_port = _free_ports(2)
        d = self.dir
        self.conf.write_text(
            f"""# Written by tests/local_slurm.py: a throw-away single-node cluster.
ClusterName={self.cluster_name}
SlurmctldHost={self.host}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={self.munge_socket}
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd.pid
SlurmctldLogFile={d}/log/slurmctld.log
SlurmdLogFile={d}/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
MpiDefault=none
SwitchType=switch/none
# No accounting: no slurmdbd, so sacct has nothing to ask and clients use squeue.
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
ReturnToService=2
# Finished jobs stay visible to squeue this long (the executor's status query).
MinJobAge=3600
InactiveLimit=0
KillWait=5
NodeName={self.host} NodeAddr=127.0.0.1 CPUs={_cpus()} RealMemory={_real_memory_mb()} State=UNKNOWN
PartitionName=test Nodes={self.host} Default=YES MaxTime=INFINITE State=UP
""",
            encoding="utf-8",
        )

    def _write_srun_wrapper(self):
        wrapper = self.dir / "bin" / "srun"
        wrapper.write_text(
            "#!/bin/sh\n"
            "# Written by tests/local_slurm.py: srun for the throw-away cluster (see there).\n"
            f'SLURM_CONF={shlex.quote(str(self.conf))} exec {shlex.quote(find("srun"))} "$@"\n',
            encoding="utf-8",
        )
        wrapper.chmod(0o755)

    def _start_daemon(self, name, cmd, **kw):
        out = open(self.dir / "log" / f"{name}.stdout", "wb")  # noqa: SIM115 (closed by stop)
        self._outputs[name] = out
        self.procs[name] = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=self.env(),
            start_new_session=True,  # a Ctrl-C in the test run reaches pytest alone
            **kw,
        )

    def _wait(self, name, ready, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            proc = self.procs[name]
            if proc.poll() is not None:
                raise SlurmStartError(
                    f"{name} exited with {proc.returncode} while starting\n"
                    f"{_tail(self.dir / 'log' / f'{name}.stdout')}\n{self.logs()}"
                )
            try:
                if ready():
                    return
            except subprocess.TimeoutExpired:
                pass
            time.sleep(0.5)
        raise SlurmStartError(f"{name} not ready after {timeout} s\n{self.logs()}")

    def _munge_answers(self) -> bool:
        if not self.munge_socket.exists():
            return False
        cred = subprocess.run(
            [find("munge"), "-n", "-S", str(self.munge_socket)],
            capture_output=True,
            timeout=10,
        )
        return cred.returncode == 0 and cred.stdout.startswith(b"MUNGE:")

    def _controller_up(self) -> bool:
        return "is UP" in self.run("scontrol", "ping", timeout=10).stdout

    def _node_idle(self) -> bool:
        state = self.run("sinfo", "--noheader", "--Node", "--format=%T", timeout=10).stdout
        state = state.strip()
        if state.startswith(("drain", "down", "fail", "inval")):
            reason = self.run("sinfo", "--noheader", "--list-reasons", timeout=10).stdout
            raise SlurmStartError(f"node {self.host} is {state}: {reason}\n{self.logs()}")
        return state == "idle"

    # ----- stop -----------------------------------------------------------------------

    def stop(self):
        """Cancel the cluster's jobs, end the daemons this object started, remove the
        folder. Safe to call twice and after a failed start."""
        ctld = self.procs.get("slurmctld")
        if ctld is not None and ctld.poll() is None:
            self._cancel_jobs()
        for name in ("slurmd", "slurmctld", "munged"):
            proc = self.procs.pop(name, None)
            if proc is None:
                continue
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=15)
            self._outputs.pop(name).close()
        if self.dir is not None and not os.environ.get("PARITY_KEEP_SLURM_DIR"):
            shutil.rmtree(self.dir, ignore_errors=True)

    def _cancel_jobs(self):
        """scancel every job of this cluster and wait (briefly) until none is running."""
        try:
            self.run("scancel", "--user=root", timeout=15)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                busy = self.run(
                    "squeue", "--noheader", "--states=PENDING,RUNNING,COMPLETING", timeout=10
                ).stdout.strip()
                if not busy:
                    return
                time.sleep(0.5)
        except subprocess.TimeoutExpired:
            pass  # the daemons are stopped next anyway

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc):
        self.stop()
