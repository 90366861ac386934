"""Probe results: the Parquet schema of one probe run, defined here once, with its writer
and its checked reader.

One file per (probe, framework, dtype, device), ``results/probes/{probe}/{framework}-{dtype}-
{device}.parquet`` (``plan.ProbeKey.result``), one row per (case, quantity) in the probe's
order (``Probe.quantities``):

* ``case``, ``quantity`` (string, not null): ``batch2``, ``w.grad``;
* ``status`` (string, not null): ``ok``, ``missing-gradient`` (the framework gave no
  gradient), ``framework-error`` (the framework raised; ``message`` says what) or
  ``unsupported`` (the framework's API lacks an op or argument of the case; ``message`` says
  which);
* ``shape`` (list<int64>) and ``values`` (list<float64>, row-major): null unless ``ok``;
  values of the run's dtype widened exactly to float64; NaN and ±Inf kept as they are;
* ``message`` (string): the framework's error or why it cannot run the case, or null;
* file key-value metadata ``parity.probe``: a JSON object with :data:`REQUIRED_METADATA`,
  sealed with its sha256 under ``parity.probe.sha256``;
* CRC-32 checksums on every page, verified by :func:`read_results` (``integrity``).

``parity.probe.judge.judge_probe_row`` turns a result and its reference into a table row's
judgement.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from parity.compare import verdicts
from parity.core import integrity
from parity.core.fileio import atomic_path
from parity.probe.format import Probe
from parity.probe.plan import ProbeKey

#: 2: page checksums and the sealed metadata (a version 1 result is refused: rerun it).
SCHEMA_VERSION = 2
METADATA_KEY = b"parity.probe"
OK = "ok"
STATUSES = (OK, verdicts.MISSING_GRADIENT, verdicts.FRAMEWORK_ERROR, verdicts.UNSUPPORTED)

ARROW_SCHEMA = pa.schema(
    [
        pa.field("case", pa.string(), nullable=False),
        pa.field("quantity", pa.string(), nullable=False),
        pa.field("status", pa.string(), nullable=False),
        pa.field("shape", pa.list_(pa.int64())),
        pa.field("values", pa.list_(pa.float64())),
        pa.field("message", pa.string()),
    ]
)

#: Metadata every result file carries, with the Python type of each value.
REQUIRED_METADATA: dict[str, type] = {
    "schema_version": int,
    "probe": str,
    "probe_hash": str,
    "framework": str,
    "framework_version": str,
    "dtype": str,
    "device": str,
    "host": str,
    "runner": dict,
}


class ProbeResultError(ValueError):
    """A result file that cannot be trusted; the message names the file and the field."""

    def __init__(self, path: str | os.PathLike, problem: str):
        super().__init__(f"{path}: {problem}")
        self.path = str(path)


@dataclass
class Outcome:
    """What one framework reported for one (case, quantity)."""

    case: str
    quantity: str
    status: str
    #: Row-major float64 values (``ok`` only).
    values: np.ndarray | None = None
    shape: tuple[int, ...] | None = None
    message: str | None = None

    @classmethod
    def ok(cls, case: str, quantity: str, values, shape: Sequence[int]) -> Outcome:
        """An outcome with values (any float array; widened to float64)."""
        arr = np.asarray(values, dtype=np.float64).reshape(-1)
        return cls(case, quantity, OK, arr, tuple(int(d) for d in shape))

    @classmethod
    def missing_gradient(cls, case: str, quantity: str) -> Outcome:
        """The framework gave no gradient for ``quantity``."""
        return cls(case, quantity, verdicts.MISSING_GRADIENT, message="no gradient")

    @classmethod
    def error(cls, case: str, quantity: str, message: str) -> Outcome:
        """The framework raised ``message`` before ``quantity`` was known."""
        return cls(case, quantity, verdicts.FRAMEWORK_ERROR, message=message)

    @classmethod
    def unsupported(cls, case: str, quantity: str, message: str) -> Outcome:
        """The framework's API cannot compute the case; ``message`` says why."""
        return cls(case, quantity, verdicts.UNSUPPORTED, message=message)


def write_results(
    path: str | os.PathLike,
    probe: Probe,
    key: ProbeKey,
    outcomes: Sequence[Outcome],
    metadata: Mapping,
) -> None:
    """Write the outcomes of one run atomically.

    ``outcomes`` must hold every (case, quantity) of ``probe`` once, in the probe's order.
    ``metadata`` gives ``framework_version``, ``host`` and ``runner``; the rest comes from
    ``probe`` and ``key``. Raises :class:`ProbeResultError` for a missing, extra or
    misordered row, an unknown status, or values whose count does not fit their shape.
    """
    want = probe.quantities()
    got = [(o.case, o.quantity) for o in outcomes]
    if got != want:
        extra = [g for g in got if g not in want]
        missing = [w for w in want if w not in got]
        what = (
            f"row {missing[0]} is missing"
            if missing
            else f"row {extra[0]} is not in the probe"
            if extra
            else "rows are out of order"
        )
        raise ProbeResultError(path, what)
    for o in outcomes:
        if o.status not in STATUSES:
            raise ProbeResultError(path, f"{o.case} {o.quantity}: unknown status {o.status!r}")
        if (o.status == OK) != (o.values is not None):
            raise ProbeResultError(path, f"{o.case} {o.quantity}: values exactly when ok")
        if o.values is not None and o.values.size != math.prod(o.shape or ()):
            raise ProbeResultError(
                path, f"{o.case} {o.quantity}: {o.values.size} values for shape {o.shape}"
            )
    meta = {
        "schema_version": SCHEMA_VERSION,
        "probe": probe.name,
        "probe_hash": probe.hash,
        "framework": key.framework,
        "dtype": key.dtype,
        "device": key.device,
        **metadata,
    }
    _check_metadata(path, meta)
    table = pa.Table.from_pydict(
        {
            "case": [o.case for o in outcomes],
            "quantity": [o.quantity for o in outcomes],
            "status": [o.status for o in outcomes],
            "shape": [list(o.shape) if o.shape is not None else None for o in outcomes],
            "values": [o.values.tolist() if o.values is not None else None for o in outcomes],
            "message": [o.message for o in outcomes],
        },
        schema=ARROW_SCHEMA,
    )
    table = table.replace_schema_metadata(
        integrity.seal(METADATA_KEY, json.dumps(meta, sort_keys=True))
    )
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp, **integrity.PARQUET_WRITE)


def _check_metadata(path, meta: Mapping) -> None:
    for k, kind in REQUIRED_METADATA.items():
        if k not in meta:
            raise ProbeResultError(path, f"metadata field {k!r} is missing")
        if not isinstance(meta[k], kind) or (kind is int and isinstance(meta[k], bool)):
            raise ProbeResultError(path, f"metadata field {k!r} has type {type(meta[k]).__name__}")
    if meta["schema_version"] != SCHEMA_VERSION:
        raise ProbeResultError(
            path, f"schema_version {meta['schema_version']} is not {SCHEMA_VERSION}; rerun"
        )


def read_results(
    path: str | os.PathLike, probe: Probe, key: ProbeKey, source_id: str | None = None
) -> tuple[dict, dict[tuple[str, str], Outcome]]:
    """Open a result file and check it against the probe and the run it must come from;
    with ``source_id`` (a Rust runner's, as this checkout and config build it:
    ``ProbePlan.source_id``), its recorded ``runner.source_id`` must be that one.

    Returns (metadata, outcomes by (case, quantity)). Raises :class:`ProbeResultError`
    naming the file and the field: unreadable file, a page or the metadata that does not
    match its checksum (corrupt), missing or malformed metadata, a
    metadata value that differs from ``probe``/``key`` (a stale result), a runner source id
    other than ``source_id`` (another build made it), a column of the
    wrong type, or rows that differ from the probe's quantities.
    """
    path = Path(path)
    try:
        pf = integrity.open_parquet(path)
    except (pa.ArrowException, OSError, UnicodeDecodeError) as e:
        raise ProbeResultError(path, f"not a readable Parquet file ({e})") from e
    try:
        raw = integrity.unseal(path, pf.metadata.metadata, METADATA_KEY)
    except integrity.IntegrityError as e:
        raise ProbeResultError(path, e.problem) from None
    if raw is None:
        raise ProbeResultError(path, "no 'parity.probe' metadata: not a probe result")
    try:
        meta = json.loads(raw)
    except json.JSONDecodeError as e:
        raise ProbeResultError(path, f"metadata is not valid JSON ({e})") from e
    _check_metadata(path, meta)
    expect = {
        "probe": probe.name,
        "probe_hash": probe.hash,
        "framework": key.framework,
        "dtype": key.dtype,
        "device": key.device,
    }
    for k, v in expect.items():
        if meta[k] != v:
            raise ProbeResultError(path, f"metadata {k!r} is {meta[k]!r}, expected {v!r}")
    if source_id is not None and meta["runner"].get("source_id") != source_id:
        raise ProbeResultError(
            path,
            f"recorded runner source id {meta['runner'].get('source_id')!r}, expected "
            f"{source_id!r} (the build of this checkout and config for {key.label}): another "
            "build made it; delete the result and rerun the workflow",
        )
    got = pf.schema_arrow
    for f in ARROW_SCHEMA:
        if f.name not in got.names:
            raise ProbeResultError(path, f"column {f.name!r} is missing")
        if got.field(f.name).type != f.type:
            raise ProbeResultError(
                path, f"column {f.name!r} has type {got.field(f.name).type}, expected {f.type}"
            )
    try:
        rows = pf.read().to_pylist()
    except (pa.ArrowException, OSError, UnicodeDecodeError) as e:
        raise ProbeResultError(
            path, f"corrupt: {e} (its page checksums do not match); rerun the job"
        ) from e
    out = {}
    for r in rows:
        values = None if r["values"] is None else np.asarray(r["values"], dtype=np.float64)
        shape = None if r["shape"] is None else tuple(r["shape"])
        out[(r["case"], r["quantity"])] = Outcome(
            r["case"], r["quantity"], r["status"], values, shape, r["message"]
        )
    if [(r["case"], r["quantity"]) for r in rows] != probe.quantities():
        raise ProbeResultError(path, "rows differ from the probe's cases and quantities")
    return meta, out
