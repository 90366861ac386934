"""What a remote host says it is (:func:`describe_host`), and every file it sent held to
that before it is recorded as good (:func:`verify`): each trace and probe result read with
its reader (seal, pages, what it must carry) and its sealed host and CPU against the
machine the remote described (:func:`provenance_problem`), so a file made on another
machine is refused, naming both. Used by the remote job (``parity.remote.fetch``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from parity.core.fileio import sha256_file
from parity.core.hosts import remote_file
from parity.remote.commands import Runner, in_checkout

#: What :func:`describe_host` asks the remote, one ``key=value`` line each (a login
#: banner or a warning on the same output is ignored). ``hostname`` is what a trace and a
#: probe result seal as their ``host`` (``socket.gethostname()``, ``uname -n``);
#: ``cpu_model`` the model name of /proc/cpuinfo, what they seal as ``runner.cpu`` there
#: (``parity.trace.provenance.cpu_model``), empty without one (macOS: a file's ``uname -p``
#: fallback names the architecture its Python runs as, not the machine); ``cpu`` is the
#: CPU's name for people (macOS's brand string).
DESCRIBE = {
    "hostname": "uname -n",
    "system": "uname -srm",
    "cpu": (
        "{ sysctl -n machdep.cpu.brand_string 2>/dev/null || "
        "sed -n 's/^model name[^:]*:[[:space:]]*//p' /proc/cpuinfo 2>/dev/null; } | head -n 1"
    ),
    "cpu_model": (
        "sed -n 's/^model name[^:]*:[[:space:]]*//p' /proc/cpuinfo 2>/dev/null | head -n 1"
    ),
}


def describe_host(r: Runner, abs_path: str) -> dict:
    """The remote's host name, system and CPU as it reports them (:data:`DESCRIBE`):
    ``{"hostname", "system", "cpu", "cpu_model"}``, each ``""`` when it gave none. Remote
    text: shown in Markdown only through ``parity.render.markdown.md_text``."""
    line = in_checkout(
        abs_path,
        "; ".join(f"printf 'parity-{key}=%s\\n' \"$({cmd})\"" for key, cmd in DESCRIBE.items()),
    )
    out = r.ssh(line, "describe", capture=True).stdout.splitlines()
    described = dict.fromkeys(DESCRIBE, "")
    for key in DESCRIBE:
        prefix = f"parity-{key}="
        described[key] = next((x[len(prefix) :].strip() for x in out if x.startswith(prefix)), "")
    return described


def provenance_problem(meta: Mapping, described: Mapping[str, str], host: str) -> str | None:
    """Why a file's sealed provenance (``meta``: a trace's or probe result's metadata,
    ``host`` and ``runner.cpu``) is not the machine remote ``host`` described
    (:func:`describe_host`), or None: a host name other than the one it reported (or none
    reported), a CPU other than the model name it reported where both are known."""
    there = described.get("hostname") or ""
    sealed = str(meta.get("host", ""))
    if not there:
        return f"remote {host} reported no host name to hold its files' sealed host {sealed!r} to"
    if sealed != there:
        return f"it was made on host {sealed!r}, but remote {host} describes itself as {there!r}"
    cpu = str((meta.get("runner") or {}).get("cpu", "") or "").strip()
    cpu_there = (described.get("cpu_model") or "").strip()
    if cpu and cpu_there and cpu != cpu_there:
        return f"it was made on a CPU {cpu!r}, but remote {host} describes its CPU as {cpu_there!r}"
    return None


def verify(
    job: Any, described: Mapping[str, str] | None = None
) -> tuple[dict[str, str], list[str]]:
    """Read every file of ``job`` (a ``fetch.FetchJob``) that came back whole with its
    reader before it is recorded as good:
    a trace's sealed metadata, what it must carry and every page against its checksum
    (``TraceReader.verify``), a probe result's seal and every page; with ``described``
    (:func:`describe_host`), its sealed host and CPU against the machine the remote
    described (:func:`provenance_problem`): a file made on another machine is refused,
    naming both. A file that fails is named and removed here (rsync, which compares sizes
    and times, would otherwise keep it and never fetch it again), so a rerun fetches it
    again. Returns (local path → sha256 of the good files, labels of the missing or bad
    cells)."""
    import json as json_module

    import pyarrow as pa

    from parity.core import integrity
    from parity.probe.results import METADATA_KEY as PROBE_KEY
    from parity.trace.reader import TraceReader
    from parity.trace.schema import TraceError

    def bad(local: str, label: str, e: Exception) -> str:
        Path(local).unlink(missing_ok=True)
        return f"{label} ({e}; removed here, a rerun fetches it again)"

    def elsewhere(local: str, path: str, label: str, why: str) -> str:
        Path(local).unlink(missing_ok=True)
        return (
            f"{label} ({local}: {why}; not this host's result: removed here; remove {path} "
            "in the remote checkout so that its run makes it there)"
        )

    good, missing = {}, []
    for path, expect in job.traces.items():
        local = remote_file(job.host, path)
        label = job.labels.get(path, path)
        if not Path(local).is_file():
            missing.append(label)
            continue
        sha = sha256_file(local)  # of the bytes that are then read and checked
        try:
            reader = TraceReader(local, expect=expect)
            reader.verify()
        except TraceError as e:
            missing.append(bad(local, label, e))
            continue
        why = None if described is None else provenance_problem(reader.meta, described, job.host)
        if why:
            missing.append(elsewhere(local, path, label, why))
            continue
        good[local] = sha
    for path in job.probes:
        local = remote_file(job.host, path)
        if not Path(local).is_file():
            missing.append(f"probe {path}")
            continue
        sha = sha256_file(local)
        try:
            pf = integrity.open_parquet(local)
            raw = integrity.unseal(local, pf.metadata.metadata, PROBE_KEY)
            if raw is None:
                raise ValueError(f"{local}: no probe metadata")
            pf.read()  # every page against its checksum
            meta = json_module.loads(raw)
        except (OSError, ValueError, pa.ArrowException, integrity.IntegrityError) as e:
            missing.append(bad(local, f"probe {path}", e))
            continue
        if described is not None:
            why = provenance_problem(meta if isinstance(meta, dict) else {}, described, job.host)
            if why:
                missing.append(elsewhere(local, path, f"probe {path}", why))
                continue
        good[local] = sha
    return good, missing
