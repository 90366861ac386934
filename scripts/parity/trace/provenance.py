"""Where and how a trace was made: host, CPU, Python, settings. Shared by both runners."""

from __future__ import annotations

import json
import platform
import socket
from collections.abc import Mapping
from typing import Any

from parity.core.config import canonical_hash
from parity.core.fileio import sha256_file
from parity.plan.keys import RunKey


def cpu_model() -> str:
    """The CPU model name from /proc/cpuinfo, else ``platform.processor()``."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def trace_metadata(
    key: RunKey,
    settings: Mapping[str, Any],
    fixture: str,
    framework_version: str,
    runner: Mapping[str, Any],
) -> dict[str, Any]:
    """Trace metadata common to every framework (see ``schema.REQUIRED_METADATA``) of run
    ``key`` with resolved ``settings``; ``config_hash`` is their canonical hash.

    ``runner`` carries what only the runner knows (threads, device detail, compiler, code
    path); it is stored as given under ``runner``.
    """
    return {
        "experiment": key.experiment,
        "run": key.run,
        "framework": key.framework,
        "framework_version": framework_version,
        "device": key.device,
        "host": socket.gethostname(),
        "optimizer": settings["optimizer"],
        "fixture_sha256": sha256_file(fixture),
        "config_hash": canonical_hash(settings),
        "settings": json.dumps(settings, sort_keys=True),
        "steps": settings["steps"],
        "record_every": settings["record"]["every"],
        "runner": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpu": cpu_model(),
            **runner,
        },
    }


def probe_metadata(framework_version: str, runner: Mapping[str, Any]) -> dict[str, Any]:
    """What a probe result records about where it was made (``parity.probe.results``): the
    framework version, the host, and ``runner`` with Python, platform and CPU added."""
    return {
        "framework_version": framework_version,
        "host": socket.gethostname(),
        "runner": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpu": cpu_model(),
            **runner,
        },
    }
