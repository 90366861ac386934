"""Reading the YAML files the workflow reads (config files, probe files, schemas): safe,
strict and bounded whatever their contents.

* *safe*: PyYAML's safe loader (libyaml's when PyYAML has it), so no tag builds an object;
* *strict*: a key given twice in one mapping is refused with both lines (PyYAML keeps the
  last one silently); keys merged in with ``<<`` may be overridden, as YAML intends;
* *bounded*: a file larger than ``max_bytes`` is refused before it is parsed, and a parsed
  document is walked with a budget of ``max_nodes`` nodes, aliases expanded, before
  anything else walks it, so neither an alias bomb (a few lines of nested aliases that
  expand to 10⁹ nodes) nor a self-referencing alias can make a later step run for ever.

:func:`number_hint` explains the one YAML 1.1 surprise a user meets here: ``1e-6`` is
text, not a number.

Pure Python: cheap to import (PyYAML is imported on first use).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

#: Defaults of the config keys ``limits.max_yaml_bytes`` and ``limits.max_yaml_nodes``.
MAX_BYTES = 4 << 20
MAX_NODES = 1_000_000
#: Deepest nesting of mappings and lists a document may have (the deepest file here has 6).
MAX_DEPTH = 64

#: Text that YAML 1.1 reads as a string but a user meant as a number in exponent form:
#: YAML 1.1's float needs a dot in the mantissa and a sign in the exponent.
_EXPONENT_NUMBER = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+\Z")


class YamlError(ValueError):
    """A YAML file that cannot be read; the message names the file (and the line)."""

    def __init__(self, path: str | os.PathLike, problem: str):
        super().__init__(f"{path}: {problem}")
        self.path = str(path)
        self.problem = problem


def _loader_class():
    import yaml

    base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

    class StrictLoader(base):
        """The safe loader, refusing a key given twice in one mapping."""

        def construct_mapping(self, node, deep=False):
            if isinstance(node, yaml.MappingNode):
                seen: dict[Any, int] = {}
                for key_node, _ in node.value:
                    if key_node.tag == "tag:yaml.org,2002:merge":
                        continue
                    key = self.construct_object(key_node, deep=True)
                    try:
                        first = seen.get(key)
                        seen.setdefault(key, key_node.start_mark.line + 1)
                    except TypeError:
                        continue  # an unhashable key: the base class refuses it
                    if first is not None:
                        raise yaml.constructor.ConstructorError(
                            None,
                            None,
                            f"duplicate key {key!r} (first given at line {first}): "
                            "YAML would keep the last value silently; give it once",
                            key_node.start_mark,
                        )
            return super().construct_mapping(node, deep=deep)

    return StrictLoader


def loads(text: str, path: str | os.PathLike = "<text>", max_nodes: int = MAX_NODES) -> Any:
    """Parse ``text`` (read from ``path``, for messages) strictly and check its size in
    nodes (:func:`check_nodes`). Raises :class:`YamlError`."""
    import yaml

    try:
        doc = yaml.load(text, Loader=_loader_class())  # a subclass of (C)SafeLoader
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line = f"line {mark.line + 1}" if mark else "somewhere"
        what = " ".join(", ".join(filter(None, [e.context, e.problem])).split())
        if what.startswith("duplicate key"):
            raise YamlError(path, f"{line}: {what}") from e
        column = f", column {mark.column + 1}" if mark else ""
        raise YamlError(path, f"not valid YAML ({line}{column}: {what})") from e
    except yaml.YAMLError as e:
        raise YamlError(path, f"not valid YAML ({' '.join(str(e).split())})") from e
    except RecursionError:
        raise YamlError(path, "nested too deeply to be read") from None
    check_nodes(doc, path, max_nodes)
    return doc


def load(path: str | os.PathLike, max_bytes: int = MAX_BYTES, max_nodes: int = MAX_NODES) -> Any:
    """Read and parse a YAML file, refusing one over ``max_bytes`` before it is parsed, a
    key given twice, and more than ``max_nodes`` nodes with aliases expanded. Raises
    :class:`YamlError` naming the file."""
    path = Path(path)
    try:
        size = path.stat().st_size
        if size > max_bytes:
            raise YamlError(
                path,
                f"{size} bytes, more than limits.max_yaml_bytes ({max_bytes}); nothing was parsed",
            )
        with open(path, encoding="utf-8") as f:
            text = f.read(max_bytes + 1)  # a file that grew since stat is still bounded
    except OSError as e:
        raise YamlError(path, f"cannot read ({e.strerror})") from e
    except UnicodeDecodeError as e:
        raise YamlError(path, f"not UTF-8 text ({e.reason} at byte {e.start})") from e
    if len(text) > max_bytes:
        raise YamlError(path, f"more than limits.max_yaml_bytes ({max_bytes}) bytes")
    return loads(text, path, max_nodes)


def check_nodes(doc: Any, where: str | os.PathLike, max_nodes: int = MAX_NODES) -> int:
    """Count the nodes of a parsed document the way any walk of it meets them (a value
    reached through several aliases counts each time), stopping at ``max_nodes``, and
    refuse nesting deeper than :data:`MAX_DEPTH` (every later walk may recurse).

    Returns the count. Raises :class:`YamlError` naming ``where`` when the budget is
    exceeded, which is also what a self-referencing alias does.
    """
    count, stack = 0, [(doc, 0)]
    while stack:
        node, depth = stack.pop()
        count += 1
        if count > max_nodes:
            raise YamlError(
                where,
                f"more than limits.max_yaml_nodes ({max_nodes}) values with aliases "
                "expanded (an alias that refers to itself, or aliases nested too deep)",
            )
        if depth > MAX_DEPTH:
            raise YamlError(where, f"nested more than {MAX_DEPTH} levels deep")
        if isinstance(node, Mapping):
            stack.extend((k, depth + 1) for k in node)
            stack.extend((v, depth + 1) for v in node.values())
        elif isinstance(node, list | tuple):
            stack.extend((v, depth + 1) for v in node)
    return count


def number_hint(value: Any) -> str | None:
    """Why a number a user wrote is text, and how to write it; None when ``value`` does not
    look like a number in exponent form.

    ``number_hint("1e-6")`` says that YAML 1.1 (PyYAML, and so Snakemake) reads ``1e-6`` as
    text, and to write ``1.0e-6``.
    """
    if not isinstance(value, str) or not _EXPONENT_NUMBER.match(value.strip()):
        return None
    mantissa, exponent = re.split("[eE]", value.strip())
    if "." not in mantissa:
        mantissa += ".0"
    elif mantissa.endswith("."):
        mantissa += "0"
    if exponent[0] not in "+-":
        exponent = "+" + exponent
    fixed = f"{mantissa}e{exponent}"
    whole = float(value)
    also = f" (or {int(whole)})" if whole.is_integer() and abs(whole) < 1e15 else ""
    return (
        f"YAML 1.1, which PyYAML and Snakemake read, takes {value!r} as text: a number in "
        f"exponent form needs a dot in the mantissa and a sign in the exponent; write "
        f"{fixed}{also}"
    )
