"""The trace writer: a run's recorded steps written as one trace of the schema
(:mod:`parity.trace.schema`), checked step by step against its layout, published
atomically when complete.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
from collections.abc import Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Self

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from parity.core import integrity
from parity.core.fileio import Writeback, atomic_path
from parity.trace.schema import (
    FLOAT_TYPES,
    INDEX_KEY,
    METADATA_KEY,
    NUMPY_TYPES,
    SCALARS,
    SCHEMA_VERSION,
    StepRecord,
    TraceError,
    TraceLayout,
    loss_bits,
    recorded_steps,
    scalars_bits,
    steps_recorded,
)

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
        self._writeback = Writeback(self._tmp)
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
        scalars: Mapping | None = None,
    ):
        """Add one recorded step.

        ``scalars``: the training loop's scalars of the step (``schema.SCALARS``) in a run
        with a loop, given at every step but 0 or at none.

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
            # Whether the caller's array owns its memory is asked before flattening: the
            # flat view never does, and asking it copied every owned array a second time
            # (docs/performance.md, "an Intel Xeon, and the second copy").
            flat = arr.reshape(-1)
            ours = not np.may_share_memory(flat, arr)  # reshape copied (not C-ordered)
            keep = ours or (flat.flags.c_contiguous and (handed_over or arr.flags.owndata))
            row[name] = flat if keep else flat.copy()
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
        if scalars is not None or "scalars" in self._index:
            stored = self._index.get("scalars")
            if stored is None and position == 1 and scalars is not None:
                stored = self._index["scalars"] = {n: [None] for n in SCALARS}  # step 0: null
            if stored is None or scalars is None:
                raise TraceError(
                    self.path, f"step {step}: loop scalars at every step but 0, or at none"
                )
            for n, v in scalars_bits(scalars).items():
                stored[n].append(v)
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
        # Each array as it is, wrapped without a copy. Not pa.array(): its first call in a
        # process imports pandas (to look for pandas types), 0.16-0.24 s of imports holding
        # the GIL on this thread during the run's first steps (docs/performance.md, "the
        # first steps of a fresh job"). write_step made every array flat, C-contiguous and
        # of the layout's little-endian dtype.
        chunks = [
            pa.Array.from_buffers(self._type, a.size, [None, pa.py_buffer(a)])
            for r in records
            for a in r.tensors.values()
        ]
        rows = sum(len(c) for c in chunks)
        if rows == 0:
            return
        table = pa.Table.from_arrays([pa.chunked_array(chunks, self._type)], schema=self.schema)
        self._writer.write_table(table, row_group_size=rows)
        self._writeback.advance()

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
        want = steps_recorded(self.meta)
        if self._index["steps"] != want:
            missing = sorted(set(want) - set(self._index["steps"])) or [None]
            err = TraceError(self.path, f"trace ends before step {missing[0]}")
            self.abort(type(err), err, None)
            raise err
        self._writer.add_key_value_metadata(
            {
                **integrity.seal(METADATA_KEY, json.dumps(self.meta, sort_keys=True)),
                **integrity.seal(INDEX_KEY, json.dumps(self._index, separators=(",", ":"))),
            }
        )
        self._writeback.close()
        self._writer.close()
        self._done = True
        self._atomic.__exit__(None, None, None)

    def fail(self, step: int, error: str) -> None:
        """Mark the run as failed at ``step`` with the framework's ``error`` message: the
        trace then holds the steps recorded before ``step`` (:func:`steps_recorded`), and
        :meth:`close` publishes it."""
        if step < 1:
            raise ValueError(f"a run fails at a step from 1, not {step}")
        self.meta.update(status="failed", failed_step=int(step), error=str(error))

    def abort(self, exc_type=None, exc=None, tb=None) -> None:
        """Discard the partial file (no-op once the trace is closed or aborted)."""
        if self._done:
            return
        self._done = True
        try:
            with contextlib.suppress(Exception):  # the file is discarded anyway
                self._wait()
            self._pool.shutdown()
            self._writeback.close()
            self._writer.close()
        finally:
            exc = exc or RuntimeError("trace aborted")
            try:
                self._atomic.__exit__(type(exc), exc, tb)
            except BaseException as raised:  # atomic_path re-raises what it was given
                if raised is not exc:
                    raise
