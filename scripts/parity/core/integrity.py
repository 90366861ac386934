"""Integrity of the files a later job reads: every reader detects a corrupted file.

* **Parquet outputs** (traces, probe results): CRC-32 page checksums are written
  (:data:`PARQUET_WRITE`) and verified on every read (:func:`open_parquet`); the
  workflow's own metadata JSON lives in the file's footer, which page checksums do not
  cover, so it is sealed with its sha256 under a second key (:func:`seal`,
  :func:`unseal`). The rest of the footer (schema, row-group offsets, row counts) is what
  the readers check anyway: an exact schema, every expected step, and pages that must
  parse and pass their checksums at the offsets it gives.
* **JSON results** (a comparison's result, a framework's optimizer defaults): a top-level
  ``sha256`` of the rest (:func:`write_sealed_json`, :func:`read_sealed_json`).
* **Tables a later job reads** (a comparison's CSV, ``summary.csv``, ``probes.csv``):
  their sha256 is recorded in the sealed JSON of the job that wrote them, and the reader
  checks it (:func:`check_file`).

Every table over many results records what it was made from (:func:`write_record`):
the run that made it, and each input's path and sha256, so that a reader (``check``, the
partial summary after a failed run) can tell a current table from one made of results
that have changed or gone since (:func:`changed`).

Measured size cost of the page checksums: docs/bad-input.md. pyarrow is imported on first
use, so that importing this stays cheap.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import socket
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from parity.core.fileio import sha256_file, write_text_atomic

#: ParquetWriter / write_table settings of every Parquet output: CRC-32 page checksums.
PARQUET_WRITE = {"write_page_checksum": True}
#: The key under which a sealed JSON result keeps the sha256 of the rest.
JSON_SEAL = "sha256"
#: The environment variable holding the id of the Snakemake run (set in rules/common.smk;
#: jobs inherit it), recorded with every table over many results.
RUN_ID_ENV = "PARITY_RUN_ID"


class IntegrityError(ValueError):
    """A file whose contents are not what was written; the message names the file."""

    def __init__(self, path: str | os.PathLike, problem: str):
        super().__init__(f"{path}: {problem}")
        self.path = str(path)
        self.problem = problem


def digest(data: bytes | str) -> str:
    """Hex sha256 of ``data`` (text as UTF-8)."""
    return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()


def open_parquet(path: str | os.PathLike, **kw: Any):
    """``pq.ParquetFile`` that verifies every page's CRC-32 as it reads it (a corrupt page
    then raises ``OSError``). Raises what ``pq.ParquetFile`` raises."""
    import pyarrow.parquet as pq

    return pq.ParquetFile(path, page_checksum_verification=True, **kw)


def seal(key: bytes, text: str) -> dict[bytes, str]:
    """File key-value metadata holding ``text`` under ``key`` and its sha256 under
    ``key + b".sha256"``."""
    return {key: text, key + b".sha256": digest(text)}


def unseal(path: str | os.PathLike, kv: Mapping[bytes, bytes] | None, key: bytes) -> bytes | None:
    """The value of ``key`` in a file's key-value metadata ``kv``, checked against its seal.

    Returns None when ``key`` is absent (not a file of this kind). Raises
    :class:`IntegrityError` when the seal is missing or does not match: the footer was
    altered after it was written.
    """
    kv = kv or {}
    raw = kv.get(key)
    if raw is None:
        return None
    want = kv.get(key + b".sha256")
    if want is None:
        raise IntegrityError(
            path, f"metadata {key.decode()!r} has no checksum: written by an older version; rerun"
        )
    if digest(raw) != want.decode(errors="replace"):
        raise IntegrityError(
            path,
            f"metadata {key.decode()!r} does not match its sha256: the file is corrupt; "
            "delete it and rerun",
        )
    return raw


def _canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


def sealed_json_text(obj: Mapping[str, Any]) -> str:
    """``obj`` as indented JSON with :data:`JSON_SEAL`, the sha256 of its canonical JSON."""
    if JSON_SEAL in obj:
        raise ValueError(f"a sealed JSON object may not hold its own {JSON_SEAL!r} key")
    return json.dumps({**obj, JSON_SEAL: digest(_canonical(obj))}, indent=1, sort_keys=True)


def write_sealed_json(path: str | os.PathLike, obj: Mapping[str, Any]) -> None:
    """Write ``obj`` atomically as sealed JSON (:func:`sealed_json_text`)."""
    write_text_atomic(path, sealed_json_text(obj))


def read_sealed_json(path: str | os.PathLike) -> dict:
    """Read a JSON object written by :func:`write_sealed_json` and check its seal.

    Returns the object without the seal. Raises :class:`IntegrityError` naming the file
    when it is not JSON, has no seal, or its contents no longer match the seal."""
    try:
        with open(path, encoding="utf-8") as f:
            obj = json.load(f)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise IntegrityError(path, f"not valid JSON ({e}): the file is corrupt; rerun") from e
    if not isinstance(obj, dict) or JSON_SEAL not in obj:
        raise IntegrityError(path, "no sha256 seal: written by an older version or by hand; rerun")
    want = obj.pop(JSON_SEAL)
    if digest(_canonical(obj)) != want:
        raise IntegrityError(
            path, "contents do not match their sha256: the file is corrupt; delete it and rerun"
        )
    return obj


def check_file(path: str | os.PathLike, sha256: str, recorded_in: str) -> None:
    """Refuse ``path`` unless its sha256 is ``sha256``, the digest ``recorded_in`` (the
    sealed file that recorded it) holds. Raises :class:`IntegrityError`."""
    got = sha256_file(path)
    if got != sha256:
        raise IntegrityError(
            path,
            f"sha256 {got[:12]}… differs from the {sha256[:12]}… that {recorded_in} recorded "
            "when it was written: the file is corrupt or was edited; rerun the job that "
            "writes it",
        )


def read_sealed_json_digest(path: str | os.PathLike) -> tuple[dict, str]:
    """(:func:`read_sealed_json` of ``path``, the sha256 of the bytes that were read)."""
    obj = read_sealed_json(path)
    return obj, sha256_file(path)


def file_record(path: str | os.PathLike) -> dict[str, str]:
    """``{"path", "sha256"}`` of a file a job reads, taken before it reads it."""
    return {"path": str(path), "sha256": sha256_file(path)}


def changed(records: Mapping[str, Mapping[str, str]]) -> list[str]:
    """Which of the files ``records`` describe (:func:`file_record`) are gone or no longer
    hold what was read: one line each, empty when every one is as it was."""
    out = []
    for r in records.values():
        if not os.path.exists(r["path"]):
            out.append(f"{r['path']} is gone")
        elif sha256_file(r["path"]) != r["sha256"]:
            out.append(f"{r['path']} changed since")
    return out


def altered(records: Mapping[str, Mapping[str, str]], recorded_in: str | os.PathLike) -> list[str]:
    """Which of the files a job wrote (``records``: kind → :func:`file_record`, as the
    sealed file ``recorded_in`` holds them) are gone or no longer what it wrote: one line
    each naming the file, what was recorded and what to do; empty when each is as it was
    written. For a table a person reads (CSV, Markdown, HTML), which no later job reads
    and so no reader would check."""
    out = []
    for r in records.values():
        if not os.path.exists(r["path"]):
            out.append(f"{r['path']} is gone ({recorded_in} recorded it); rerun the workflow")
            continue
        got = sha256_file(r["path"])
        if got != r["sha256"]:
            out.append(
                f"{r['path']}: sha256 {got[:12]}… differs from the {r['sha256'][:12]}… that "
                f"{recorded_in} recorded when it was written: edited by hand or corrupt; "
                "rerun the job that writes it (delete the file and rerun the workflow)"
            )
    return out


def run_id() -> str:
    """The id of this Snakemake run (:data:`RUN_ID_ENV`), or a new one outside a run."""
    return os.environ.get(RUN_ID_ENV) or new_run_id()


def new_run_id() -> str:
    """A run id: UTC time and a random suffix, ``20261201T005500Z-1a2b3c4d``."""
    now = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    return f"{now}-{uuid.uuid4().hex[:8]}"


def write_record(
    path: str | os.PathLike,
    table: str,
    made_from: Mapping[str, Mapping[str, str]],
    written: Mapping[str, str | os.PathLike],
    **more: Any,
) -> dict:
    """Write the sealed record of a table over many results: which ``table`` it is, the run
    and host that made it and when, each input it was made from (``made_from``, path →
    :func:`file_record`), the sha256 of every file it wrote (``written``, kind → path) and
    ``more`` (the job's params and code hashes, whether it is partial). Returns it."""
    record = {
        "table": table,
        "run_id": run_id(),
        "made_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "host": socket.gethostname(),
        "made_from": dict(made_from),
        "tables": {k: file_record(p) for k, p in written.items()},
        **more,
    }
    write_sealed_json(path, record)
    return record


# ----- runner binaries ---------------------------------------------------------------

#: What a build job records of the binary it wrote, beside it (``<binary>.record.json``).
BINARY_RECORD = "{binary}.record.json"


class BinaryError(RuntimeError):
    """A runner binary that is not the one its build wrote; the message names it and what
    to do."""


def binary_record(binary: str | os.PathLike) -> Path:
    """Where the build record of ``binary`` lies."""
    return Path(BINARY_RECORD.format(binary=binary))


def write_binary_record(binary: str | os.PathLike, source_id: str) -> dict:
    """Record, after a build job checked ``binary``'s source id, its sha256, size and source
    id beside it (sealed JSON, written atomically). Returns the record."""
    record = {
        "binary": Path(binary).name,
        "binary_sha256": sha256_file(binary),
        "size": os.path.getsize(binary),
        "source_id": source_id,
    }
    write_text_atomic(binary_record(binary), sealed_json_text(record))
    return record


def check_binary(binary: str | os.PathLike, expected: Mapping[str, str] | None = None) -> dict:
    """The build record of ``binary`` when the file is the one its build wrote (its sha256
    equals the recorded one) and the record is this binary's build: what a job checks
    before it starts a runner, so a wrapper script put in its place, or another build's
    binary copied in (with its record or without), is refused by name rather than run.

    The record must name the binary's own file name; with ``expected`` (``binary``, the
    file name, and ``source_id``: what this checkout and config build for the job,
    ``parity.plan.builds``), its name and source id must be those (another release,
    backend or own port copied in with its record; a build of other sources). Raises
    :class:`BinaryError` naming the binary, both builds and what to do."""
    path = binary_record(binary)
    remedy = f"delete {binary} and rerun: the workflow builds it again"
    try:
        record = read_sealed_json(path)
    except FileNotFoundError:
        raise BinaryError(f"{binary} has no build record ({path}): {remedy}") from None
    except (OSError, ValueError, IntegrityError) as e:
        raise BinaryError(
            f"{binary}: its build record {path} is unreadable ({e}): {remedy}"
        ) from None
    try:
        got = sha256_file(binary)
    except OSError as e:
        raise BinaryError(f"{binary} cannot be read ({e.strerror}): {remedy}") from None
    if got != record.get("binary_sha256"):
        raise BinaryError(
            f"{binary} is not the binary its build wrote (sha256 {got[:12]}…, the build "
            f"recorded {str(record.get('binary_sha256'))[:12]}…): {remedy}"
        )
    name = Path(binary).name
    want = {"binary": name, **(expected or {})}
    have = {k: record.get(k) for k in want}
    if have != want:
        raise BinaryError(
            f"{binary} is another build's: its build record is of {_build(have)}, this "
            f"checkout and config build {_build(want)} here: {remedy}"
        )
    return record


def _build(identity: Mapping[str, Any]) -> str:
    """``candle-parity-0.11.1-cpu (source id c29b602cc5965e3e)`` of a binary identity."""
    out = str(identity.get("binary"))
    if "source_id" in identity:
        out += f" (source id {identity['source_id']})"
    return out
