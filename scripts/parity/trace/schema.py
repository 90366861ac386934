"""The trace schema: its layout and metadata, defined here once and checked on write
(:mod:`parity.trace.writer`) and on read (:mod:`parity.trace.reader`).

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
  it is null); and, for a run with a training loop (docs/loop.md), ``scalars``: per
  :data:`SCALARS` name a list with one entry per step (null at step 0), ``lr`` a list of
  each parameter group's learning rate in the step's update, ``grad_norm`` the total
  gradient norm before clipping, ``clip_coef`` the clip coefficient (null without norm
  clipping), each float64 as its 16 hex digits like the loss;
* CRC-32 checksums on every page, verified whenever a page is read (``integrity``): a
  corrupt trace is refused by name, never compared.

Why one flat column: Parquet stores a repetition level per value of a list column and a
definition level per row of every nullable column, and each costs about as much to write
as the value itself; a column per parameter needs one or the other (parameters differ in
length, a row group's columns may not). One non-null float column writes at about the
speed of the raw bytes (measured: ``bench/trace_layouts.py``, docs/performance.md).

Rows are grouped so that one row group holds whole steps, about ``writer.ROW_GROUP_BYTES``
of them or one step if larger (Parquet caps a row group at 64Mi rows, so a larger step
spans row groups), which lets readers stream a trace a step at a time
(``reader.TraceReader.iter_steps``).

What is written and what is read cannot drift apart: the writer and the reader take every
name, type and check from this module (:class:`TraceLayout`, :data:`REQUIRED_METADATA`,
:func:`check_metadata`, :func:`recorded_steps`).
"""

from __future__ import annotations

import math
import os
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from parity.plan.limits import DEFAULTS as LIMIT_DEFAULTS

#: 3: the flat layout, one ``value`` column and the sealed ``parity.trace.index`` (a
#: version 2 trace, a fixed-size-list column per parameter, is refused: rerun it).
SCHEMA_VERSION = 3
METADATA_KEY = b"parity.trace"
INDEX_KEY = b"parity.trace.index"
VALUE_COLUMN = "value"

FLOAT_TYPES = {"f32": pa.float32(), "f64": pa.float64()}
NUMPY_TYPES = {"f32": np.dtype("<f4"), "f64": np.dtype("<f8")}
EXTRA_KINDS = ("grad", "exp_avg", "exp_avg_sq")
#: The scalars a step of a run with a training loop records (``index["scalars"]``).
SCALARS = ("lr", "grad_norm", "clip_coef")
#: ``failed``: the framework raised an error during a step (its message in the metadata's
#: ``error``, the step in ``failed_step``); the steps before it are recorded.
STATUSES = ("complete", "diverged", "failed")

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


def scalars_bits(scalars: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A step's loop scalars as the index stores them (each float as :func:`loss_bits`)."""
    if scalars is None:
        return None
    out: dict[str, Any] = {}
    for name in SCALARS:
        v = scalars.get(name)
        out[name] = [loss_bits(x) for x in v] if isinstance(v, list | tuple) else loss_bits(v)
    return out


def scalars_from_bits(stored: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The inverse of :func:`scalars_bits`."""
    if stored is None:
        return None
    return {
        name: [loss_from_bits(x) for x in v] if isinstance(v, list) else loss_from_bits(v)
        for name, v in stored.items()
    }


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
        # element counts by parameter name, so numel is a lookup (a layout of many tensors
        # would otherwise cost the square of their number)
        object.__setattr__(self, "_sizes", {n: math.prod(s) for n, s in self.params})

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
        return self._sizes[base]

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
    """One recorded step: its number, loss (None at step 0), tensors by column name, and the
    training loop's scalars where the run has a loop.

    ``flat``, when the reader was asked for every parameter, is the step's parameters
    concatenated in state_dict order (1-D, the trace's dtype, :meth:`TraceLayout.params_size`
    values): the same memory the parameter arrays of ``tensors`` are views of."""

    step: int
    loss: float | None
    tensors: dict[str, np.ndarray] = field(default_factory=dict)
    flat: np.ndarray | None = None
    #: The loop's scalars (:data:`SCALARS`; ``lr`` a list per group), for a run with one.
    scalars: dict[str, Any] | None = None


def check_metadata(path, meta: Mapping, limits: Mapping[str, Any] | None = None) -> None:
    """Refuse trace metadata without a :data:`REQUIRED_METADATA` field, with a field of the
    wrong type, of another schema version, with an unknown status or with sizes beyond
    ``limits`` (:func:`check_sizes`): raises :class:`TraceError` naming ``path`` and the
    field."""
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
    check_sizes(path, meta, limits)
    if meta["status"] == "failed":
        step, error = meta.get("failed_step"), meta.get("error")
        if not isinstance(step, int) or isinstance(step, bool) or not isinstance(error, str):
            raise TraceError(path, "a failed trace needs failed_step (int) and error (text)")


#: More parameters (or three times as many extras) than any model of this workflow has: a
#: footer listing more is refused before anything is built from it.
MAX_TENSORS = 100_000
#: The limits a reader holds a trace's footer to (config ``limits``, ``parity.plan.limits``).
READER_LIMITS = ("max_steps", "max_tensor_elements")


def reader_limits(
    limits: Mapping[str, Any] | None = None, expect: Mapping[str, Any] | None = None
) -> dict[str, int]:
    """The bounds a reader holds a trace's footer to, so that a crafted footer is refused in
    microseconds instead of exhausting memory: ``max_steps`` (the ``steps`` it may claim)
    and ``max_tensor_elements`` (the elements of any one parameter), each the config's
    ``limits`` (``parity.plan.limits.settings(config)``; without it the defaults,
    ``parity.plan.limits.DEFAULTS``), raised to what ``expect`` (a trace
    expectation, ``parity.plan.keys.trace_expectation``) asks for: its ``steps`` and its
    largest parameter. The plan refuses a config whose steps or shapes exceed its limits
    before any job runs, so a trace read against its expectation is bounded by the values
    the plan checked, whatever the config raised the limits to; a trace read without one
    (a report page, a tool) is bounded by the ``limits`` its caller passes."""
    given = limits or {}
    out = {k: int(given.get(k, LIMIT_DEFAULTS[k])) for k in READER_LIMITS}
    expect = expect or {}
    steps = expect.get("steps")
    if type(steps) is int:
        out["max_steps"] = max(out["max_steps"], steps)
    shapes = expect.get("params")
    if isinstance(shapes, Mapping) and shapes:
        largest = max(math.prod(int(d) for d in s) for s in shapes.values())
        out["max_tensor_elements"] = max(out["max_tensor_elements"], largest)
    return out


def check_sizes(path, meta: Mapping, limits: Mapping[str, Any] | None = None) -> None:
    """Refuse trace metadata whose sizes cannot be a run of this workflow, before anything
    is built from them: a dtype other than f32/f64, ``steps`` beyond ``limits.max_steps``,
    ``record_every`` below 1, more than :data:`MAX_TENSORS` parameters or extras, a
    parameter that is not ``[name, shape]`` with a shape of non-negative integers, or one
    beyond ``limits.max_tensor_elements``, an extra that names no parameter. ``limits``:
    the bounds (:func:`reader_limits`; default the config defaults). Raises
    :class:`TraceError` naming ``path``, the field and the limit to raise."""
    bound = reader_limits(limits)
    most_steps, most_elements = bound["max_steps"], bound["max_tensor_elements"]
    if meta["dtype"] not in FLOAT_TYPES:
        raise TraceError(path, f"metadata field 'dtype' is {meta['dtype']!r}, not f32 or f64")
    if not 0 <= meta["steps"] <= most_steps:
        raise TraceError(
            path,
            f"metadata field 'steps' is {meta['steps']}, beyond 0..{most_steps} "
            "(limits.max_steps of the config reading it)",
        )
    if meta["record_every"] < 1:
        raise TraceError(path, f"metadata field 'record_every' is {meta['record_every']}, not >= 1")
    params, extras = meta["params"], meta["extras"]
    if len(params) > MAX_TENSORS or len(extras) > 3 * MAX_TENSORS:
        raise TraceError(path, f"metadata lists {len(params)} parameters and {len(extras)} extras")
    names = set()
    for i, p in enumerate(params):
        ok = (
            isinstance(p, list)
            and len(p) == 2
            and isinstance(p[0], str)
            and isinstance(p[1], list)
            and all(type(d) is int and d >= 0 for d in p[1])
            and len(p[1]) <= 8
        )
        if not ok:
            raise TraceError(path, f"metadata field 'params'[{i}] is not [name, shape]")
        if math.prod(p[1]) > most_elements:
            raise TraceError(
                path,
                f"parameter {p[0]!r} claims {math.prod(p[1])} elements, more than "
                f"limits.max_tensor_elements ({most_elements}) of the config reading it",
            )
        names.add(p[0])
    for e in extras:
        kind, _, name = e.partition(":") if isinstance(e, str) else ("", "", "")
        if kind not in EXTRA_KINDS or name not in names:
            raise TraceError(
                path, f"metadata field 'extras' holds {e!r}, not an extra of a parameter"
            )


def steps_recorded(meta: Mapping) -> list[int]:
    """The steps a trace with metadata ``meta`` holds: :func:`recorded_steps`, or for a run
    that failed at step k those before k."""
    want = recorded_steps(meta["steps"], meta["record_every"])
    if meta["status"] == "failed":
        return [s for s in want if s < meta["failed_step"]]
    return want
