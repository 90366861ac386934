"""Which of the workflow's Python files a job runs, and a hash of them.

A rule passes :func:`code_version` of its script as a param, so Snakemake reruns the job
when code that shapes its output changes, and only then: the hash covers the script and
every ``parity`` module it imports, followed transitively through the modules' own
imports (function-level ones included). An edit to the comparison maths therefore reruns
the comparison jobs and no training job.
"""

from __future__ import annotations

import hashlib
import os
import re
from functools import cache
from pathlib import Path

from parity.core.memo import Memo

#: The ``parity`` package (this module is ``parity.core.codeversion``).
PACKAGE = Path(__file__).resolve().parents[1]
#: ``from parity import a, b`` / ``from parity.x import y`` (scripts) and ``from . import a``
#: / ``from .x import y`` / ``from ..x import y`` (modules inside the package).
_IMPORT = re.compile(
    r"^\s*from\s+(parity(?:\.[\w.]+)?|\.+[\w.]*)\s+import\s+(\([^)]*\)|[^\n]+)", re.MULTILINE
)


def _module_file(dotted: str) -> Path | None:
    """The file of ``parity.a.b`` (a module or a package's ``__init__``), or None."""
    parts = dotted.split(".")[1:]
    base = PACKAGE.joinpath(*parts)
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _dotted(path: Path) -> str:
    rel = path.relative_to(PACKAGE).with_suffix("")
    parts = [p for p in rel.parts if p != "__init__"]
    return ".".join(["parity", *parts])


@cache
def _imports(path: Path) -> frozenset[Path]:
    """The ``parity`` files one file imports directly (read once per process: the rules'
    closures share most of their files)."""
    here = _dotted(path) if path.is_relative_to(PACKAGE) else None
    package = here if here and path.name == "__init__.py" else (here or "").rpartition(".")[0]
    found = set()
    for source, names in _IMPORT.findall(path.read_text(encoding="utf-8")):
        if source.startswith("."):
            if here is None:
                continue
            dots = len(source) - len(source.lstrip("."))
            base = package.split(".")
            base = base[: len(base) - (dots - 1)] if dots > 1 else base
            source = ".".join(base + ([source.lstrip(".")] if source.lstrip(".") else []))
        names = [n.split(" as ")[0].strip() for n in names.strip("()").split(",")]
        for target in [source] + [f"{source}.{n}" for n in names if n.isidentifier()]:
            f = _module_file(target)
            if f is not None:
                found.add(f)
    # A package's modules load its __init__ first.
    for f in list(found):
        for parent in f.relative_to(PACKAGE).parents:
            init = PACKAGE / parent / "__init__.py"
            if init.is_file() and init != f:
                found.add(init)
    return frozenset(found)


@cache
def closure(script: str) -> tuple[Path, ...]:
    """The script and every ``parity`` file it runs, sorted; ``script`` is a path."""
    seen: set[Path] = set()
    todo = [Path(script).resolve()]
    while todo:
        f = todo.pop()
        if f in seen:
            continue
        seen.add(f)
        todo.extend(_imports(f) - seen)
    return tuple(sorted(seen))


def code_version(script: str, memo: Memo | None = None) -> str:
    """SHA-256 (16 hex digits) of the script and the ``parity`` files it runs
    (:func:`closure`), each by its path inside the repository and its bytes. With ``memo``
    (``parity.core.memo``), the value recorded while no file of the code has changed."""
    if memo is not None:
        root = PACKAGE.parents[1]
        key = os.path.relpath(Path(script).resolve(), root)
        return memo.get("code", key, lambda: code_version(script))
    h = hashlib.sha256()
    root = PACKAGE.parents[1]
    for f in closure(script):
        h.update(str(f.relative_to(root)).encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:16]
