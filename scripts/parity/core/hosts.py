"""Naming a remote host's devices and files here, which runs a host makes, and why a host
has no results: what the remote job, the cross-host tables, the probe table and the summary
all need of a host (config ``remote``), kept below them all."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from parity.core import paths

#: A host's job status (its last failed attempt's stage and error), beside its manifest.
REMOTE_STATUS = paths.REMOTE_DIR + "/status.json"


def device_label(device: str, host: str) -> str:
    """``cpu@mac``: a device of a remote host, kept apart from this host's ``cpu``."""
    return f"{device}@{host}"


def remote_file(host: str, local_path: str) -> str:
    """Where a result the remote wrote at ``local_path`` (``results/traces/…``) comes back
    here: ``results/remote/{host}/traces/…``."""
    rel = Path(local_path).relative_to("results")
    return str(Path(paths.REMOTE_DIR.format(host=host)) / rel)


def host_runs(plan, devices: Sequence[str]) -> list:
    """The runs a host's device targets make: every run of the plan restricted to
    ``devices``, with the reference runs its comparisons need (made there too)."""
    return plan.for_devices(list(devices)).runs()


def here_device(plan, device: str) -> str:
    """The device here that a remote ``device``'s runs are held against across hosts: the
    same device when this host runs it, else the reference device (the CPU)."""
    if device in plan.devices and device not in plan.imported_devices:
        return device
    return "cpu" if plan.reference_device == "same" else plan.reference_device


def host_status(host: str) -> dict | None:
    """Why ``host`` has no results here: None when its manifest is written (its job
    finished); else ``{"stage", "error", "log"}``: the stage that failed and its error as
    the host's last failed attempt recorded them (``status.json``), or stage ``not run``
    when no attempt recorded one (its job did not run: an earlier job failed, or it was
    not asked for), and the host's log."""
    if Path(paths.REMOTE_MANIFEST.format(host=host)).is_file():
        return None
    status: dict = {}
    status_path = Path(REMOTE_STATUS.format(host=host))
    if status_path.is_file():
        try:
            status = json.loads(status_path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            status = {}
    return {
        "stage": status.get("stage", "not run"),
        "error": status.get("error", "its job did not run (an earlier job failed)"),
        "log": paths.REMOTE_LOG.format(host=host),
    }
