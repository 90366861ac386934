"""The trace schema: defined here once, checked on write and on read.

A trace is one Parquet file per run,
``results/traces/{experiment}/{run}-{dtype}-{device}.parquet``, in the *flat* layout
(schema version 3):

* one column, ``value``, in the run's own dtype (float32 or float64), not null and not
  nested: one row per recorded value. Each recorded step is a block of consecutive rows
  (step 0 is the initial state): every parameter's flattened values after that step's
  update, in PyTorch layout and state_dict order (:attr:`TraceLayout.names`), then the
  optional ``grad:<key>``, ``exp_avg:<key>``, ``exp_avg_sq:<key>`` tensors the step holds,
  in the layout's order (an extra is absent, not stored, where it is null: at step 0);
* file key-value metadata ``parity.trace``: a JSON object with :data:`REQUIRED_METADATA`,
  sealed with its sha256 under ``parity.trace.sha256`` (``integrity.seal``);
* file key-value metadata ``parity.trace.index`` (:data:`INDEX_KEY`), sealed likewise: a
  JSON object with ``steps`` (the recorded steps, in order), ``loss`` (per step the loss of
  that step's forward pass, before the update, widened exactly from the run's dtype, as
  the 16 hex digits of its IEEE 754 binary64 bit pattern; null at step 0), ``offsets``
  (per step the row of its first value) and ``absent`` (extra column → the steps at which
  it is null);
* CRC-32 checksums on every page, verified whenever a page is read (``integrity``): a
  corrupt trace is refused by name, never compared.

Why one flat column: Parquet stores a repetition level per value of a list column and a
definition level per row of every nullable column, and each costs about as much to write
as the value itself; a column per parameter needs one or the other (parameters differ in
length, a row group's columns may not). One non-null float column writes at about the
speed of the raw bytes (measured: ``bench/trace_layouts.py``, docs/performance.md).

Rows are grouped so that one row group holds whole steps, about :data:`ROW_GROUP_BYTES`
of them or one step if larger (Parquet caps a row group at 64Mi rows, so a larger step
spans row groups), which lets readers stream a trace a step at a time
(:meth:`TraceReader.iter_steps`).

This module is longer than the others on purpose: the schema, its writer and its checked
reader stay in one file so that what is written and what is read cannot drift apart.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import struct
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from parity.core import integrity
from parity.core.fileio import atomic_path

#: 3: the flat layout, one ``value`` column and the sealed ``parity.trace.index`` (a
#: version 2 trace, a fixed-size-list column per parameter, is refused: rerun it).
SCHEMA_VERSION = 3
METADATA_KEY = b"parity.trace"
INDEX_KEY = b"parity.trace.index"
VALUE_COLUMN = "value"
ROW_GROUP_BYTES = 8 << 20
#: Row groups a TraceWriter lets wait for its writer thread before a step waits for them.
QUEUED_GROUPS = 2


def writer_options(layout: TraceLayout) -> dict:
    """Parquet settings for a trace, chosen by measurement (bench/trace_layouts.py,
    bench/compare_throughput.py, bench/recording_overhead.py): float data gains nothing
    from dictionary encoding, page statistics cost more than the encoding itself, and
    compression buys little on parameters (zstd level 1 with BYTE_STREAM_SPLIT saved 12%
    of the space for five times the write time). The Arrow schema is not stored in the
    footer: the Parquet schema (one non-null float column) says all of it. Every page
    carries its CRC-32 (``integrity.PARQUET_WRITE``; its cost is in docs/bad-input.md)."""
    return {
        "compression": "none",
        "use_dictionary": False,
        "write_statistics": False,
        "store_schema": False,
        **integrity.PARQUET_WRITE,
    }


FLOAT_TYPES = {"f32": pa.float32(), "f64": pa.float64()}
NUMPY_TYPES = {"f32": np.dtype("<f4"), "f64": np.dtype("<f8")}
EXTRA_KINDS = ("grad", "exp_avg", "exp_avg_sq")
STATUSES = ("complete", "diverged")

#: Metadata every trace carries, with the Python type of each value.
REQUIRED_METADATA: dict[str, type | tuple[type, ...]] = {
    "schema_version": int,
    "experiment": str,
    "run": str,
    "framework": str,
    "framework_version": str,
    "dtype": str,
    "device": str,
    "host": str,
    "optimizer": dict,
    "fixture_sha256": str,
    "config_hash": str,
    "steps": int,
    "record_every": int,
    "params": list,
    "extras": list,
    "status": str,
    "diverged_step": (int, type(None)),
    "runner": dict,
}


class TraceError(ValueError):
    """A trace that cannot be trusted; the message names the file and the field."""

    def __init__(self, path: str | os.PathLike, problem: str):
        super().__init__(f"{path}: {problem}")
        self.path = str(path)
        self.problem = problem


def recorded_steps(steps: int, every: int) -> list[int]:
    """Steps a run records: 0, every ``every``-th step, and the last step ``steps``."""
    if steps < 1 or every < 1:
        raise ValueError(f"steps ({steps}) and every ({every}) must be at least 1")
    return sorted({0, steps, *range(every, steps + 1, every)})


def extra_column(kind: str, param: str) -> str:
    """Column name of an optional tensor: ``grad:fc1.weight`` and the like."""
    if kind not in EXTRA_KINDS:
        raise ValueError(f"unknown extra column kind {kind!r}; known: {', '.join(EXTRA_KINDS)}")
    return f"{kind}:{param}"


def loss_bits(loss: float | None) -> str | None:
    """A loss as the index stores it: the 16 hex digits of its float64 bit pattern (exact,
    NaN payloads included), or None."""
    return None if loss is None else struct.pack(">d", loss).hex()


def loss_from_bits(bits: str | None) -> float | None:
    """The float64 loss of :func:`loss_bits`' text. Raises ``ValueError`` unless ``bits``
    is None or 16 hex digits."""
    if bits is None:
        return None
    if len(bits) != 16:
        raise ValueError(f"{bits!r} is not 16 hex digits")
    return struct.unpack(">d", bytes.fromhex(bits))[0]


@dataclass(frozen=True)
class TraceLayout:
    """Tensors of a trace: dtype, parameters (state_dict key, shape) and extra columns."""

    dtype: str
    params: tuple[tuple[str, tuple[int, ...]], ...]
    extras: tuple[str, ...] = ()

    def __post_init__(self):
        if self.dtype not in FLOAT_TYPES:
            raise ValueError(f"dtype {self.dtype!r} is not one of {sorted(FLOAT_TYPES)}")

    @classmethod
    def of(
        cls,
        dtype: str,
        params: Iterable[tuple[str, Sequence[int]]],
        extras: Iterable[str] = (),
    ) -> TraceLayout:
        """Build a layout from plain sequences (shapes as lists are fine)."""
        return cls(dtype, tuple((n, tuple(int(d) for d in s)) for n, s in params), tuple(extras))

    @property
    def names(self) -> tuple[str, ...]:
        """Parameter names in state_dict order."""
        return tuple(n for n, _ in self.params)

    @property
    def columns(self) -> tuple[str, ...]:
        """Every tensor a step may hold, in the order its values are stored: the
        parameters, then the extras."""
        return (*self.names, *self.extras)

    def numel(self, name: str) -> int:
        """Element count of a parameter or extra column. Raises ``KeyError`` for a name
        that is neither."""
        base = name.split(":", 1)[1] if ":" in name else name
        for n, shape in self.params:
            if n == base:
                return math.prod(shape)
        raise KeyError(name)

    def arrow_schema(self) -> pa.Schema:
        """The Arrow schema of a trace: one non-null column :data:`VALUE_COLUMN` of the
        dtype (float32 or float64), the same for every layout of that dtype."""
        return pa.schema([pa.field(VALUE_COLUMN, FLOAT_TYPES[self.dtype], nullable=False)])

    def params_size(self) -> int:
        """Values of one step's parameters (the first rows of every step)."""
        return sum(math.prod(s) for _, s in self.params)

    def row_bytes(self) -> int:
        """Bytes of tensor data in one step with every extra present."""
        width = NUMPY_TYPES[self.dtype].itemsize
        return width * sum(self.numel(c) for c in self.columns)


@dataclass
class StepRecord:
    """One recorded step: its number, loss (None at step 0) and tensors by column name.

    ``flat``, when the reader was asked for every parameter, is the step's parameters
    concatenated in state_dict order (1-D, the trace's dtype, :meth:`TraceLayout.params_size`
    values): the same memory the parameter arrays of ``tensors`` are views of."""

    step: int
    loss: float | None
    tensors: dict[str, np.ndarray] = field(default_factory=dict)
    flat: np.ndarray | None = None


def _check_metadata(path, meta: Mapping) -> None:
    for key, kind in REQUIRED_METADATA.items():
        if key not in meta:
            raise TraceError(path, f"metadata field {key!r} is missing")
        if not isinstance(meta[key], kind) or (kind is int and isinstance(meta[key], bool)):
            raise TraceError(path, f"metadata field {key!r} has type {type(meta[key]).__name__}")
    if meta["schema_version"] != SCHEMA_VERSION:
        raise TraceError(
            path,
            f"schema_version {meta['schema_version']} is not {SCHEMA_VERSION}; rerun the job",
        )
    if meta["status"] not in STATUSES:
        raise TraceError(path, f"metadata field 'status' is {meta['status']!r}")


def _all_finite(loss: float | None, arrays: Iterable[np.ndarray]) -> bool:
    """Whether the loss and every array are finite, where an array is finite when its
    float64 sum is: NaN and ±Inf propagate through the sum, and float64 arrays whose
    values sum past 1e308 count as non-finite too (no training run is sane there). For
    float32 arrays the test is their largest and smallest value being finite (NaN
    propagates through both), the same answer: a float64 sum of float32 values cannot
    overflow (|sum| ≤ n · 3.4e38), and two passes without a cast cost less than one with
    (measured: docs/performance.md)."""
    if loss is not None and not math.isfinite(loss):
        return False
    for a in arrays:
        if a.size == 0:
            continue
        if a.dtype == np.float32:
            if not (math.isfinite(a.max()) and math.isfinite(a.min())):
                return False
        else:
            with np.errstate(over="ignore", invalid="ignore"):  # the overflow is the answer
                if not math.isfinite(np.sum(a, dtype=np.float64)):
                    return False
    return True


class TraceWriter:
    """Writes a trace step by step, checking every step against the layout.

    The file appears at ``path`` only when :meth:`close` succeeds (written to a temporary
    file and renamed). Use as a context manager: an exception inside the block discards it.

    ``metadata`` must hold every :data:`REQUIRED_METADATA` field except ``schema_version``,
    ``params``, ``extras``, ``dtype``, ``status`` and ``diverged_step``, which the writer sets.
    The run is marked ``diverged`` at the first recorded step whose loss or parameters hold
    NaN or ±Inf; the values themselves are kept.

    Steps are encoded on one background thread (pyarrow and numpy release the GIL), so a
    run keeps training while earlier row groups are checked and written; at most
    :data:`QUEUED_GROUPS` row groups wait (so a hiccup of the disk or of a shared CPU does
    not stop the run at once), each holding the arrays it was handed.
    """

    def __init__(self, path: str | os.PathLike, layout: TraceLayout, metadata: Mapping):
        self.path = Path(path)
        self.layout = layout
        self.schema = layout.arrow_schema()
        self.meta = dict(metadata)
        self.meta.update(
            schema_version=SCHEMA_VERSION,
            dtype=layout.dtype,
            params=[[n, list(s)] for n, s in layout.params],
            extras=list(layout.extras),
            status="complete",
            diverged_step=None,
        )
        self.expected_steps = recorded_steps(self.meta["steps"], self.meta["record_every"])
        self._numel = {c: layout.numel(c) for c in layout.columns}
        self._type = FLOAT_TYPES[layout.dtype]
        self._buffer: list[StepRecord] = []
        self._buffered_bytes = 0
        self._index: dict = {"steps": [], "loss": [], "offsets": [], "absent": {}}
        self._rows = 0
        self._done = False
        self._atomic = atomic_path(self.path)
        self._tmp = self._atomic.__enter__()
        self._writer = pq.ParquetWriter(self._tmp, self.schema, **writer_options(layout))
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="trace-writer")
        self._pending: list[Future] = []

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if self._done:
            return
        if exc_type is None:
            self.close()
        else:
            self.abort(exc_type, exc, tb)

    def write_step(
        self,
        step: int,
        loss: float | None,
        tensors: Mapping[str, np.ndarray],
        handed_over: bool = False,
    ):
        """Add one recorded step.

        ``tensors`` maps column names to arrays of the layout's dtype with the parameter's
        element count (any shape; flattened in C order). Every parameter column is required;
        extra columns may be absent (null), and are absent at step 0. The step is written
        later, on the writer thread: arrays that own their data, and every contiguous array
        when ``handed_over`` (the caller keeps no other reference to their memory, as with a
        decoded frame), are kept as they are, and the caller must not change them; others
        are copied.

        Raises :class:`TraceError` for a step out of order, an unknown or missing column,
        a wrong dtype or element count, or a loss at step 0 / missing loss later.
        """
        position = len(self._index["steps"])
        if position >= len(self.expected_steps) or self.expected_steps[position] != step:
            want = self.expected_steps[position] if position < len(self.expected_steps) else None
            raise TraceError(self.path, f"step {step} written where step {want} was expected")
        if (loss is None) != (step == 0):
            raise TraceError(self.path, f"step {step}: loss must be null exactly at step 0")
        want_dtype = NUMPY_TYPES[self.layout.dtype]
        row: dict[str, np.ndarray] = {}
        for name, value in tensors.items():
            if name not in self._numel:
                raise TraceError(self.path, f"step {step}: column {name!r} is not in the layout")
            arr = np.asarray(value)
            if arr.dtype != want_dtype:
                raise TraceError(
                    self.path,
                    f"step {step}: column {name!r} has dtype {arr.dtype}, expected {want_dtype}",
                )
            if arr.size != self._numel[name]:
                raise TraceError(
                    self.path,
                    f"step {step}: column {name!r} has {arr.size} values, "
                    f"expected {self._numel[name]}",
                )
            arr = arr.reshape(-1)
            keep = arr.flags.c_contiguous and (handed_over or arr.flags.owndata)
            row[name] = arr if keep else arr.copy()
        missing = [n for n in self.layout.names if n not in row]
        if missing:
            raise TraceError(self.path, f"step {step}: parameter column {missing[0]!r} is missing")
        step, size = int(step), 0
        ordered = {}
        for c in self.layout.columns:
            if c in row:
                ordered[c] = row[c]
                size += self._numel[c]
            else:
                self._index["absent"].setdefault(c, []).append(step)
        self._index["steps"].append(step)
        self._index["loss"].append(loss_bits(loss))
        self._index["offsets"].append(self._rows)
        self._rows += size
        self._buffer.append(StepRecord(step, loss, ordered))
        self._buffered_bytes += size * want_dtype.itemsize
        # A row group holds whole steps, at most ROW_GROUP_BYTES of them (or one larger
        # step): written as soon as the next step, at its largest, would not fit.
        if self._buffered_bytes + self.layout.row_bytes() > ROW_GROUP_BYTES:
            self._flush()

    def _flush(self) -> None:
        if not self._buffer:
            return
        records, self._buffer, self._buffered_bytes = self._buffer, [], 0
        while len(self._pending) >= QUEUED_GROUPS:
            self._pending.pop(0).result()  # re-raises the writer thread's error
        self._pending.append(self._pool.submit(self._write_group, records))

    def _write_group(self, records: list[StepRecord]) -> None:
        """On the writer thread: mark the first non-finite step, write one row group."""
        names = self.layout.names
        if self.meta["diverged_step"] is None:
            for r in records:
                if not _all_finite(r.loss, (r.tensors[n] for n in names)):
                    self.meta.update(status="diverged", diverged_step=r.step)
                    break
        chunks = [pa.array(a, self._type) for r in records for a in r.tensors.values()]
        rows = sum(len(c) for c in chunks)
        if rows == 0:
            return
        table = pa.Table.from_arrays([pa.chunked_array(chunks, self._type)], schema=self.schema)
        self._writer.write_table(table, row_group_size=rows)

    def _wait(self) -> None:
        """Wait for every row group being written; re-raise the first error."""
        pending, self._pending = self._pending, []
        for p in pending:
            p.result()

    def close(self) -> None:
        """Check that every expected step was written, write the metadata and the index,
        publish the file.

        Raises :class:`TraceError` if steps are missing (the partial file is discarded).
        """
        self._flush()
        self._wait()
        self._pool.shutdown()
        if self._index["steps"] != self.expected_steps:
            missing = sorted(set(self.expected_steps) - set(self._index["steps"]))
            err = TraceError(self.path, f"trace ends before step {missing[0]}")
            self.abort(type(err), err, None)
            raise err
        self._writer.add_key_value_metadata(
            {
                **integrity.seal(METADATA_KEY, json.dumps(self.meta, sort_keys=True)),
                **integrity.seal(INDEX_KEY, json.dumps(self._index, separators=(",", ":"))),
            }
        )
        self._writer.close()
        self._done = True
        self._atomic.__exit__(None, None, None)

    def abort(self, exc_type=None, exc=None, tb=None) -> None:
        """Discard the partial file (no-op once the trace is closed or aborted)."""
        if self._done:
            return
        self._done = True
        try:
            with contextlib.suppress(Exception):  # the file is discarded anyway
                self._wait()
            self._pool.shutdown()
            self._writer.close()
        finally:
            exc = exc or RuntimeError("trace aborted")
            try:
                self._atomic.__exit__(type(exc), exc, tb)
            except BaseException as raised:  # atomic_path re-raises what it was given
                if raised is not exc:
                    raise


class TraceReader:
    """Opens a trace and checks it against the schema and, optionally, expectations.

    ``expect`` may give metadata values the trace must carry (``experiment``, ``run``,
    ``dtype``, ``device``, ``fixture_sha256``, ``steps``, ``record_every``) and ``params``
    (state_dict key → shape) the trace must hold exactly.

    Opening reads the footer only (metadata, index, row-group sizes); the values are read,
    and their page checksums verified, by :meth:`iter_steps`.

    Raises :class:`TraceError` naming the file and the field: unreadable or truncated file,
    missing or malformed metadata or index, a column missing, renamed or of the wrong type,
    an expectation not met, steps missing or out of order, or a row count that does not
    match the steps' tensors.
    """

    def __init__(self, path: str | os.PathLike, expect: Mapping | None = None):
        self.path = Path(path)
        if not self.path.exists():
            raise TraceError(path, "file does not exist")
        try:
            self._file = integrity.open_parquet(self.path, pre_buffer=False, buffer_size=1 << 20)
        except (pa.ArrowException, OSError, UnicodeDecodeError) as e:
            raise TraceError(path, f"not a readable Parquet file ({e})") from e
        kv = self._file.metadata.metadata
        try:
            raw = integrity.unseal(path, kv, METADATA_KEY)
        except integrity.IntegrityError as e:
            raise TraceError(path, e.problem) from None
        if raw is None:
            raise TraceError(path, "no 'parity.trace' metadata: not a trace of this workflow")
        try:
            self.meta = json.loads(raw)
        except json.JSONDecodeError as e:
            raise TraceError(path, f"metadata is not valid JSON ({e})") from e
        _check_metadata(path, self.meta)
        self.layout = TraceLayout.of(self.meta["dtype"], self.meta["params"], self.meta["extras"])
        self._check_schema()
        if expect:
            self._check_expectations(expect)
        self._read_index(kv)

    def _read_index(self, kv) -> None:
        """Load and check ``parity.trace.index``: ``self.steps``, ``self.losses``, each
        step's columns (``self._present``) and first row (``self._offsets``)."""
        try:
            raw = integrity.unseal(self.path, kv, INDEX_KEY)
        except integrity.IntegrityError as e:
            raise TraceError(self.path, e.problem) from None
        if raw is None:
            raise TraceError(self.path, "no 'parity.trace.index' metadata")
        try:
            index = json.loads(raw)
            steps, losses = index["steps"], index["loss"]
            offsets, absent = index["offsets"], index["absent"]
            if not (isinstance(steps, list) and all(type(s) is int for s in steps)):
                raise ValueError("'steps' is not a list of integers")
            if not (isinstance(losses, list) and len(losses) == len(steps)):
                raise ValueError("'loss' is not a list with one entry per step")
            self.losses = [loss_from_bits(b) for b in losses]
            if not (isinstance(offsets, list) and len(offsets) == len(steps)):
                raise ValueError("'offsets' is not a list with one entry per step")
            if not isinstance(absent, dict) or set(absent) - set(self.layout.extras):
                raise ValueError("'absent' names a column that is not an extra of the layout")
            absent = {c: set(v) for c, v in absent.items()}
        except (KeyError, TypeError, ValueError, AttributeError, json.JSONDecodeError) as e:
            raise TraceError(self.path, f"index is malformed ({e})") from None
        self.steps: list[int] = steps
        want = recorded_steps(self.meta["steps"], self.meta["record_every"])
        if steps != want:
            missing = sorted(set(want) - set(steps))
            what = f"step {missing[0]} is missing" if missing else "steps are out of order"
            raise TraceError(self.path, f"{what} (found {len(steps)} of {len(want)} steps)")
        for step, loss in zip(steps, self.losses, strict=True):
            if (loss is None) != (step == 0):
                raise TraceError(self.path, f"step {step}: loss must be null exactly at step 0")
        self._present = [
            tuple(c for c in self.layout.columns if s not in absent.get(c, ())) for s in steps
        ]
        self._numel = {c: self.layout.numel(c) for c in self.layout.columns}
        sizes = [sum(self._numel[c] for c in cols) for cols in self._present]
        self._sizes = sizes
        self._offsets = [0, *np.cumsum(sizes, dtype=np.int64).tolist()]
        if offsets != self._offsets[:-1]:
            raise TraceError(self.path, "index offsets do not match the steps' tensors")
        rows = self._file.metadata.num_rows
        if rows != self._offsets[-1]:
            raise TraceError(
                self.path, f"holds {rows} values where its steps' tensors make {self._offsets[-1]}"
            )

    def _read(self, how):
        """``how(parquet_file)``, with a corrupt page (a CRC-32 that does not match, or
        bytes that do not decode) refused as a :class:`TraceError` naming the file."""
        try:
            return how(self._file)
        except (pa.ArrowException, OSError, UnicodeDecodeError) as e:
            raise TraceError(
                self.path, f"corrupt: {e} (its page checksums do not match); rerun the job"
            ) from e

    def _check_schema(self) -> None:
        want = self.layout.arrow_schema()
        got = self._file.schema_arrow
        (f,) = want
        if f.name not in got.names:
            raise TraceError(self.path, f"column {f.name!r} is missing")
        g = got.field(f.name)
        if g.type != f.type or g.nullable:
            raise TraceError(
                self.path,
                f"column {f.name!r} has type {g.type}{'' if not g.nullable else ' (nullable)'}, "
                f"expected {f.type} not null",
            )
        extra = [n for n in got.names if n != f.name]
        if extra:
            raise TraceError(self.path, f"column {extra[0]!r} is not in the trace's layout")

    def _check_expectations(self, expect: Mapping) -> None:
        for key, value in expect.items():
            if key == "params":
                have = {n: tuple(s) for n, s in self.meta["params"]}
                want = {n: tuple(s) for n, s in value.items()}
                for name, shape in want.items():
                    if name not in have:
                        raise TraceError(self.path, f"parameter {name!r} is missing")
                    if have[name] != shape:
                        raise TraceError(
                            self.path,
                            f"parameter {name!r} has shape {list(have[name])}, "
                            f"expected {list(shape)}",
                        )
                unknown = sorted(set(have) - set(want))
                if unknown:
                    raise TraceError(self.path, f"parameter {unknown[0]!r} is not expected")
            elif self.meta.get(key) != value:
                raise TraceError(
                    self.path, f"metadata {key!r} is {self.meta.get(key)!r}, expected {value!r}"
                )

    def byte_range(self, row_group: int = 0) -> tuple[int, int]:
        """Where row group ``row_group``'s values lie in the file: (offset of its first data
        page, bytes of its column chunk), for tools that check or corrupt a trace's pages
        (tests). Raises ``IndexError`` for a row group the trace does not have."""
        chunk = self._file.metadata.row_group(row_group).column(0)
        return chunk.data_page_offset, chunk.total_compressed_size

    @property
    def diverged_step(self) -> int | None:
        """First recorded step with a non-finite loss or parameter, or None."""
        return self.meta["diverged_step"]

    def _numpy(self, chunk: pa.Array) -> np.ndarray:
        """A non-null float array's values as a read-only numpy view of its buffer (no
        copy; unlike ``to_numpy``, which imports pandas on first use: 0.6 s)."""
        dtype = NUMPY_TYPES[self.layout.dtype]
        if chunk.null_count:  # the column is declared not null; a reader never gives one
            raise TraceError(self.path, "corrupt: null values in the value column")
        data = chunk.buffers()[1]
        return np.frombuffer(data, dtype, count=len(chunk), offset=chunk.offset * dtype.itemsize)

    def _row_groups(self, first: int = 0) -> Iterator[np.ndarray]:
        """The values of each row group from ``first`` on, one at a time, as a 1-D
        read-only array of the trace's dtype (zero-copy from pyarrow's buffer). The
        column chunk is read through a 1 MiB buffer rather than whole (less memory to
        fault in; measured: docs/performance.md)."""
        for g in range(first, self._file.num_row_groups):
            column = self._read(
                lambda f, g=g: f.read_row_group(g, columns=[VALUE_COLUMN], use_threads=False)
            ).column(0)
            if column.num_chunks == 1:
                values = self._numpy(column.chunk(0))
            else:
                values = np.concatenate([self._numpy(c) for c in column.chunks])
            column = None
            want = self._file.metadata.row_group(g).num_rows
            if len(values) != want:  # a page header (which no checksum covers) is damaged
                raise TraceError(
                    self.path,
                    f"corrupt: row group {g} gave {len(values)} values where its footer "
                    f"says {want}; rerun the job",
                )
            yield values
            values = None  # let it go before the next row group is read

    def _record(self, k: int, values: np.ndarray, names: Sequence[str], every: bool) -> StepRecord:
        """Step ``k``'s record from ``values``, exactly its rows."""
        tensors, at = {}, 0
        for c in self._present[k]:
            n = self._numel[c]
            if c in names:
                tensors[c] = values[at : at + n]
            at += n
        flat = values[: self.layout.params_size()] if every else None
        return StepRecord(self.steps[k], self.losses[k], tensors, flat)

    def iter_steps(self, columns: Sequence[str] | None = None) -> Iterator[StepRecord]:
        """Yield the recorded steps in order, reading one row group at a time.

        ``columns`` selects tensor columns (default: every parameter; unknown names are
        ignored). Arrays are 1-D read-only views in the trace's dtype of the row group's
        values as pyarrow read them (no copy); null extras are absent from ``tensors``;
        ``flat`` is set when every parameter was asked for. A row group is let go before the
        next is read, and read on this thread (``compare.aligned`` reads ahead), which
        keeps the memory near one row group's data. Raises :class:`TraceError` for a
        corrupt page.
        """
        names = set(self.layout.names if columns is None else columns)
        every = set(self.layout.names) <= names
        k, pending = 0, []  # pending: the first rows of a step that spans row groups
        n = len(self.steps)
        while k < n and self._sizes[k] == 0:
            yield self._record(k, np.empty(0, NUMPY_TYPES[self.layout.dtype]), names, every)
            k += 1
        for values in self._row_groups():
            at = 0
            if pending:
                need = self._sizes[k] - sum(len(p) for p in pending)
                pending.append(values[:need])
                at = min(need, len(values))
                if at < need:
                    continue
                yield self._record(k, np.concatenate(pending), names, every)
                pending, k = [], k + 1
            while k < n and at + self._sizes[k] <= len(values):
                yield self._record(k, values[at : at + self._sizes[k]], names, every)
                at, k = at + self._sizes[k], k + 1
            if at < len(values):
                pending = [values[at:]]
            values = None
        while k < n and not pending and self._sizes[k] == 0:
            yield self._record(k, np.empty(0, NUMPY_TYPES[self.layout.dtype]), names, every)
            k += 1
        if k < n:  # cannot happen once the footer's row counts were checked at open
            raise TraceError(self.path, f"corrupt: the values end inside step {self.steps[k]}")

    def read_step(self, step: int, columns: Sequence[str] | None = None) -> StepRecord:
        """One step (see :meth:`iter_steps`), reading only the row groups that hold it.
        Raises ``KeyError`` if it was not recorded, :class:`TraceError` for a corrupt page."""
        if step not in self.steps:
            raise KeyError(f"{self.path}: step {step} was not recorded")
        k = self.steps.index(step)
        names = set(self.layout.names if columns is None else columns)
        every = set(self.layout.names) <= names
        start, end = self._offsets[k], self._offsets[k + 1]
        first, row = 0, 0
        meta = self._file.metadata
        while first < meta.num_row_groups and row + meta.row_group(first).num_rows <= start:
            row += meta.row_group(first).num_rows
            first += 1
        pieces = [np.empty(0, NUMPY_TYPES[self.layout.dtype])]
        if end > start:
            for values in self._row_groups(first):
                lo = max(start - row, 0)
                pieces.append(values[lo : end - row])
                row += len(values)
                if row >= end:
                    break
        values = pieces[-1] if len(pieces) == 2 else np.concatenate(pieces)
        return self._record(k, values, names, every)
