"""The names a config refers to that the JSON schema cannot check: every device named in
``imported_devices`` is configured, every experiment named in ``only``, ``determinism``
and ``framework_summary`` exists, and the framework table's rows name each experiment
and each label once (a reader tells rows apart by them). Pure Python: cheap to import.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from parity.core.config import ConfigError


def reference_problems(config: Mapping[str, Any]) -> list[ConfigError]:
    """Every reference of ``config`` (a schema-valid config) to a device or experiment it
    does not configure, and every name given twice in ``framework_summary``: one
    :class:`ConfigError` each, naming the key, in config order; empty when all hold."""
    problems: list[ConfigError] = []
    devices = list(config["devices"])
    experiments = config["experiments"]
    for i, dev in enumerate(config.get("imported_devices", [])):
        if dev not in devices:
            problems.append(
                ConfigError(
                    f"imported_devices[{i}]",
                    f"{dev!r} is not in devices {devices}: its traces would not be compared",
                )
            )
    for i, name in enumerate(config.get("only") or []):
        if name not in experiments:
            problems.append(
                ConfigError(
                    f"only[{i}]",
                    f"{name!r} is not an experiment of this config ({', '.join(experiments)})",
                )
            )
    for i, name in enumerate(config.get("determinism", {}).get("experiments", [])):
        if name not in experiments:
            problems.append(
                ConfigError(
                    f"determinism.experiments[{i}]", f"{name!r} is not an experiment of this config"
                )
            )
    first: dict[tuple[str, str], int] = {}
    for i, item in enumerate(config.get("framework_summary", [])):
        if item["experiment"] not in experiments:
            problems.append(
                ConfigError(
                    f"framework_summary[{i}].experiment",
                    f"{item['experiment']!r} is not an experiment of this config",
                )
            )
        # A row per experiment, and rows a reader can tell apart.
        for field in ("experiment", "label"):
            j = first.setdefault((field, item[field]), i)
            if j != i:
                problems.append(
                    ConfigError(
                        f"framework_summary[{i}].{field}",
                        f"{item[field]!r} is already the {field} of framework_summary[{j}]; "
                        "each row names its own experiment and label",
                    )
                )
    return problems
