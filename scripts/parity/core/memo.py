"""A record, kept in the working folder across Snakemake starts, of two results that every
start computes while it builds the DAG and that depend only on files and the config: the
code version of each rule's script (``codeversion.code_version``), each probe file read and
validated (``probe.loader.load``: YAML, the JSON Schema, shape inference, normalization)
and the config checked against its schema with the schema's defaults filled in (which
imports jsonschema, 0.1 s alone). On a no-op rerun they were a fifth of this workflow's own
start-up (docs/performance.md).

The record is ``.snakemake/parity-memo.json`` under the working folder: JSON, one object

* ``format``: :data:`FORMAT` (another format is ignored);
* ``stamp``: :func:`code_stamp` of the workflow's code when the record was written;
* ``code``: script path → code version;
* ``probes``: key → the normalized probe spec (``Probe.spec``);
* ``config``: :func:`json_key` of a config as given → that config validated, defaults in.

Every entry is valid only under the ``stamp`` it was written with (:func:`code_stamp`):
the relative path and bytes of every file under ``scripts/`` and ``schemas/``, the Python
version and the distributions installed beside PyYAML and jsonschema (which read and check
probe files). Any edit, a checkout of another commit, a new module or a library upgrade
gives another stamp, and the record starts afresh. The stamp reads the files' bytes rather
than trusting their sizes and modification times: an edit that keeps both (a file system
with coarse times, a copy or archive with normalized times, two checkouts sharing one
working folder) would otherwise be missed, and hashing them costs 3.1 ms a start against
1.6 ms for stat-ing them (the record spares about 0.2 s). A probe's key also holds the
file's own bytes (its SHA-256), its path and the size limits, so an edited probe file is
read again. A record that is missing, unreadable or malformed is ignored, and writing it
is best effort (atomic; a folder that cannot be written is read as before, only slower).
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import importlib.util
import json
import os
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from parity.core.fileio import write_text_atomic

#: The layout of the record; another value (an older record) is ignored.
FORMAT = 2
#: The record's path, relative to the working folder.
RECORD = os.path.join(".snakemake", "parity-memo.json")
#: The workflow's folder (this module is scripts/parity/core/memo.py).
ROOT = Path(__file__).resolve().parents[3]
#: What the memoized results are computed from: the code and the schemas.
WATCHED = ("scripts", "schemas")
#: The kinds of entries.
KINDS = ("code", "probes", "config")
#: The libraries whose versions shape a probe's entry (YAML parsing, JSON Schema checks).
LIBRARIES = ("yaml", "jsonschema")


def libraries(names: Iterable[str] = LIBRARIES) -> list[str]:
    """The Python version (``sys.version``) and, sorted, the ``*.dist-info``/``*.egg-info``
    names (which carry each distribution's version) in every folder that holds one of the
    packages ``names``: an upgrade of PyYAML, jsonschema or anything installed beside them
    changes it. A package that is not installed adds nothing. About 0.2 ms."""
    out, folders = [sys.version], []
    for name in names:
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.origin is not None:
            folder = os.path.dirname(os.path.dirname(spec.origin))
            if folder not in folders:
                folders.append(folder)
    for folder in folders:
        with contextlib.suppress(OSError):
            found = os.listdir(folder)
            out += sorted(e for e in found if e.endswith((".dist-info", ".egg-info")))
    return out


def code_stamp(
    root: Path = ROOT, watched: Iterable[str] = WATCHED, names: Iterable[str] = LIBRARIES
) -> str:
    """SHA-256 (hex) of :func:`libraries` of ``names`` and of the relative path and bytes of
    every file under ``root``/``watched``, sorted. Left out: ``__pycache__`` and names that
    start with a dot (editor swap and lock files; nothing imports them). A linked folder is
    followed (its modules are imported through the link), each real folder once, so a cycle
    ends. A file that cannot be read (a dangling link, removed while walked) counts as its
    path and the error; a folder removed while walked counts as nothing."""
    h = hashlib.sha256(json.dumps(libraries(names)).encode())
    seen = set()  # (device, inode) of each folder walked
    skip = len(str(root)) + 1
    for top in watched:
        for folder, dirs, files in os.walk(root / top, followlinks=True):
            try:
                st = os.stat(folder)
            except OSError:  # removed while walked (a checkout of another commit)
                continue
            if (st.st_dev, st.st_ino) in seen:
                dirs[:], files = [], []
            seen.add((st.st_dev, st.st_ino))
            dirs[:] = sorted(d for d in dirs if d != "__pycache__" and not d.startswith("."))
            for name in sorted(f for f in files if not f.startswith(".")):
                path = os.path.join(folder, name)
                try:
                    with open(path, "rb") as f:
                        data = f.read()
                    h.update(f"{path[skip:]}\0{len(data)}\0".encode())
                    h.update(data)
                except OSError as e:
                    h.update(f"{path[skip:]}\0unreadable: {e.strerror}\0".encode())
    return h.hexdigest()


class Memo:
    """The record of one working folder (:data:`RECORD` under ``workdir``), read once.

    Entries read from a record with another stamp are dropped; entries of this stamp that
    this process neither read nor wrote are dropped at the next write, so the record holds
    what the current config and code use. New entries are written once, by :meth:`save`
    (the Snakefile calls it when its rules are read, so that jobs started elsewhere, such
    as Slurm's, find them), and at the process's exit for any computed later: a write per
    entry cost a start after every code edit about 1 ms each, 36 of them here.
    """

    def __init__(self, workdir: str | os.PathLike, stamp: str | None = None):
        self.path = Path(workdir) / RECORD
        self.stamp = stamp if stamp is not None else code_stamp()
        self._old: dict[str, dict] = {kind: {} for kind in KINDS}
        self._used: dict[str, dict] = {kind: {} for kind in KINDS}
        self._new = False
        atexit.register(self.save)
        try:
            record = json.loads(self.path.read_text(encoding="utf-8"))
            if record.get("format") == FORMAT and record.get("stamp") == self.stamp:
                self._old = {k: dict(record[k]) for k in self._old}
        except (OSError, ValueError, TypeError, KeyError, AttributeError, RecursionError):
            pass  # no record, or not one of ours: compute everything

    def get(self, kind: str, key: str, compute: Callable[[], Any]) -> Any:
        """The entry ``key`` of ``kind`` (one of :data:`KINDS`): the recorded value, else
        ``compute()``, recorded (written by :meth:`save`). Whatever ``compute`` raises
        propagates, nothing recorded."""
        if key in self._old[kind]:
            value = self._old[kind][key]
            self._used[kind][key] = value
            return value
        value = compute()
        self._used[kind][key] = value
        self._old[kind][key] = value
        self._new = True
        return value

    def save(self) -> None:
        """Write the record (atomically), if an entry was computed since the last save."""
        if not self._new:
            return
        self._new = False
        record = {"format": FORMAT, "stamp": self.stamp, **self._used}
        with contextlib.suppress(OSError):  # a read-only working folder: nothing is kept
            write_text_atomic(self.path, json.dumps(record))


def probe_key(path: str | os.PathLike, data: bytes, limits: Any) -> str:
    """Key of a probe file's entry: SHA-256 of its path, its bytes' SHA-256 and the size
    limits it was checked against (JSON)."""
    parts = [str(path), hashlib.sha256(data).hexdigest(), limits]
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def json_key(value: Any) -> str | None:
    """Key of a JSON value's entry: SHA-256 of its canonical JSON (sorted keys), or None
    when JSON would not give ``value`` back unchanged (a non-string key, a tuple, NaN), so
    an entry made from it could differ from what computing gives."""
    try:
        text = json.dumps(value, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError):
        return None
    if json.loads(text) != value:
        return None
    return hashlib.sha256(text.encode()).hexdigest()
