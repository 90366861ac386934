"""Concise messages for a config that fails its JSON schema (and why a number written
``1e-6`` is text: ``yamlfile.number_hint``).

Snakemake's ``validate`` reports the first error with the whole sub-schema; users need the
key path and the reason. This module re-runs the same schema with ``jsonschema`` (the
validator Snakemake itself uses) to phrase it.
"""

from __future__ import annotations

from collections.abc import Mapping

import jsonschema

from parity.core import yamlfile

#: How every schema pattern ends: at the true end of the text, not before a final newline.
TRUE_END = "(?!\\n)$"


def key_path(path) -> str:
    """``experiments.a3_adamw.optimizer.betas[1]`` from a jsonschema error path."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def schema_errors(config: Mapping, schema_path: str) -> list[str]:
    """Every schema violation of ``config`` as ``key.path: reason``, most specific first."""
    schema = yamlfile.load(schema_path)
    cls = jsonschema.validators.validator_for(schema)
    validator = cls(schema)
    messages = []
    for err in sorted(validator.iter_errors(config), key=lambda e: -len(e.absolute_path)):
        best = jsonschema.exceptions.best_match([err])
        hint = yamlfile.number_hint(best.instance)
        message = f"{best.message}: {hint}" if hint else best.message
        if best.validator == "pattern":
            # The schemas end their patterns with (?!\n)$ (Python's $ also matches before a
            # final newline); the reader is shown the pattern as the rule it states.
            readable = best.validator_value.replace(TRUE_END, "$")
            message = f"{best.instance!r} does not match {readable!r}"
            if isinstance(best.instance, str) and "\n" in best.instance:
                message += " (it holds a line break)"
        messages.append(f"{key_path(best.absolute_path)}: {message}")
    return messages
