"""The trace reader: a trace opened and checked against the schema
(:mod:`parity.trace.schema`) and what the config says it must carry, then streamed a row
group at a time.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa

from parity.core import integrity
from parity.plan.limits import recorded_rows
from parity.trace.schema import (
    INDEX_KEY,
    METADATA_KEY,
    NUMPY_TYPES,
    SCALARS,
    VALUE_COLUMN,
    StepRecord,
    TraceError,
    TraceLayout,
    check_metadata,
    loss_from_bits,
    reader_limits,
    scalars_from_bits,
    steps_recorded,
)


class TraceReader:
    """Opens a trace and checks it against the schema and, optionally, expectations.

    ``expect`` may give metadata values the trace must carry (``experiment``, ``run``,
    ``dtype``, ``device``, ``fixture_sha256``, ``steps``, ``record_every``), ``params``
    (state_dict key → shape) the trace must hold exactly and ``runner_source_id``, the source
    id its runner's build record must hold (``runner.source_id``; ``parity.plan.builds``),
    and ``torch_version``, the torch release a PyTorch trace must have been made by (its
    ``framework_version`` without the local part; ``versions.torch_version``).

    ``limits`` are the config's limits (``parity.plan.limits.settings(config)``; default
    its defaults): the footer's ``steps`` and each parameter's elements are bounded by its
    ``max_steps`` and ``max_tensor_elements``, raised to what ``expect`` asks for
    (``schema.reader_limits``), before anything is built from the footer. A reader in the
    workflow passes one or the other, so it accepts every trace the plan let the config
    ask for, however far the config raised the limits.

    Opening reads the footer only (metadata, index, row-group sizes); the values are read,
    and their page checksums verified, by :meth:`iter_steps` (:meth:`verify` reads them
    all and keeps none).

    Raises :class:`TraceError` naming the file and the field: unreadable or truncated file,
    missing or malformed metadata or index, a column missing, renamed or of the wrong type,
    an expectation not met, steps missing or out of order, or a row count that does not
    match the steps' tensors.
    """

    def __init__(
        self,
        path: str | os.PathLike,
        expect: Mapping | None = None,
        limits: Mapping | None = None,
    ):
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
        if not isinstance(self.meta, dict):
            raise TraceError(path, "metadata is not a JSON object")
        check_metadata(path, self.meta, reader_limits(limits, expect))
        if expect:  # before anything is built from the metadata
            self._check_expectations(expect)
        self.layout = TraceLayout.of(self.meta["dtype"], self.meta["params"], self.meta["extras"])
        self._check_schema()
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
            scalars = index.get("scalars")
            if scalars is not None:
                if set(scalars) != set(SCALARS) or any(
                    not isinstance(v, list) or len(v) != len(steps) for v in scalars.values()
                ):
                    raise ValueError("'scalars' does not hold one entry per step of each scalar")
                per_step = [
                    scalars_from_bits({n: scalars[n][k] for n in SCALARS})
                    for k in range(len(steps))
                ]
                per_step[0] = None
            else:
                per_step = [None] * len(steps)
        except (KeyError, TypeError, ValueError, AttributeError, json.JSONDecodeError) as e:
            raise TraceError(self.path, f"index is malformed ({e})") from None
        self.steps: list[int] = steps
        #: Each step's loop scalars (None at step 0 and in a run without a loop).
        self.scalars: list[dict | None] = per_step
        self.has_scalars = scalars is not None
        if len(steps) > recorded_rows(self.meta["steps"], self.meta["record_every"]):
            raise TraceError(
                self.path, f"index lists {len(steps)} steps, more than the run records"
            )
        want = steps_recorded(self.meta)
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
            elif key == "runner_source_id":
                self._check_source_id(value)
            elif key == "torch_version":
                self._check_torch(value)
            elif self.meta.get(key) != value:
                raise TraceError(
                    self.path, f"metadata {key!r} is {self.meta.get(key)!r}, expected {value!r}"
                )

    def _check_torch(self, want: str) -> None:
        """Refuse a PyTorch trace made by another torch release than ``want``, the one this
        environment has (``versions.torch_version``; the recorded ``framework_version``
        without its local part, ``2.5.1+cpu`` → ``2.5.1``)."""
        got = self.meta.get("framework_version")
        if not isinstance(got, str) or got.split("+", 1)[0] != want:
            raise TraceError(
                self.path,
                f"made by torch {got}, this environment has torch {want}: delete the trace "
                "and rerun the workflow",
            )

    def _check_source_id(self, want: str) -> None:
        """Refuse a trace whose runner's source id (``runner.source_id``, the build record
        of the binary that made it) is not ``want``, the source id this checkout and config
        build for its run (``parity.plan.builds``)."""
        runner = self.meta.get("runner")
        got = runner.get("source_id") if isinstance(runner, Mapping) else None
        if got != want:
            raise TraceError(
                self.path,
                f"recorded runner source id {got!r}, expected {want!r} (the build of this "
                f"checkout and config for run {self.meta.get('run')}, "
                f"{self.meta.get('framework')} {self.meta.get('framework_version')} on "
                f"{self.meta.get('device')}): another "
                "build made it (another release, backend, own port or checkout); delete the "
                "trace and rerun the workflow",
            )

    def verify(self) -> None:
        """Read every value of the trace, each page against its CRC-32 and each row group
        against the count its footer gives, keeping none of it: what a file accepted from
        elsewhere (another host, an import, a cache) must pass before it is recorded as
        good, since opening reads the footer only. Raises :class:`TraceError` naming the
        file for a corrupt page."""
        for _ in self._row_groups():  # each row group let go before the next is read
            pass

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
        return StepRecord(self.steps[k], self.losses[k], tensors, flat, self.scalars[k])

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
