"""Config primitives: the error a config raises, merging of overrides, canonical hashing,
and the defaults of optional settings.

``config.yaml`` passes ``schemas/config.schema.yaml`` first (``rules/common.smk``); what a
JSON schema cannot say is checked while the config is resolved (:mod:`parity.plan.resolve`,
:mod:`parity.plan.faults`, :mod:`parity.plan.plan`), each problem raised as a :class:`ConfigError`
that names its key path. Pure Python: importing this must stay cheap.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Mapping
from typing import Any

#: The study's comparison of an experiment; it writes the paths without a comparison name.
MAIN = "main"

#: What a recorded step holds when the config says nothing (see config.yaml ``record``).
RECORD_DEFAULTS = {"every": 1, "tensors": None, "grads": False, "moments": False}

#: Diagnosis settings when the config gives none (docs/diagnosis.md).
DIAGNOSIS_DEFAULTS = {
    "f64_rounding_factor": 1000.0,
    "fp64_rule": {"multiplier": "auto", "atol": 1e-9},
}

#: Localisation (``parity.localise.replay``, ``parity.localise.walk``): ``all`` localises every
#: comparison, not only those that fail or are expected to; ``step`` is ``auto`` (the first
#: step that differs) or a step number; ``f32_floor_ulps`` the rounding floor of the float32
#: rule, in units of float32 roundoff (2^-24) times the tensor's RMS.
LOCALISE_DEFAULTS = {"all": False, "step": "auto", "f32_floor_ulps": 4.0}


class ConfigError(ValueError):
    """A config that passed the JSON schema but cannot run; the message starts with the
    offending key path (``experiments.a3_adam.comparisons.main.candidate: …``)."""

    def __init__(self, path: str, problem: str):
        super().__init__(f"config: {path}: {problem}")
        self.path = path
        #: Every problem found, this one included (see :meth:`every`).
        self.problems: list[ConfigError] = [self]

    @staticmethod
    def every(problems: list[ConfigError]) -> ConfigError:
        """One error for ``problems`` (non-empty): the problem itself when there is one,
        else a :class:`ConfigErrors` listing each, so a user fixes a config in one pass."""
        return problems[0] if len(problems) == 1 else ConfigErrors(problems)


class ConfigErrors(ConfigError):
    """Several :class:`ConfigError`, one per line; ``path`` is the first one's."""

    def __init__(self, problems: list[ConfigError]):
        ValueError.__init__(self, "\n  ".join(str(p) for p in problems))
        self.path = problems[0].path
        self.problems = list(problems)


def merge(base: Mapping, override: Mapping) -> dict:
    """A deep copy of ``base`` with ``override`` merged over it, mappings recursively."""
    out = copy.deepcopy(dict(base))
    for k, v in override.items():
        if isinstance(v, Mapping) and isinstance(out.get(k), Mapping):
            out[k] = merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def canonical_hash(obj: Any) -> str:
    """SHA-256 of the canonical JSON of ``obj`` (sorted keys, no spaces)."""
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()
