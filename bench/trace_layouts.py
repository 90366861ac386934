"""Trace layouts side by side: the time to write the scale experiment's 201 float32 steps
(1.86M values each, 7.4 MB) in each layout that keeps typed float columns, against writing
the same bytes raw, and the time to read them back a row group at a time into numpy.

Every layout is written with the trace's Parquet settings (no compression, no dictionary
unless the layout needs one, no statistics, CRC-32 page checksums), one row group per step,
to a file in a fresh folder, each try interleaved with the others; figures are medians.

* ``raw``: the values' bytes, one write per step (the floor).
* ``list``: schema version 2, one fixed-size-list column per parameter, one row per step.
* ``wide, first-row step``: one plain float column per parameter, one row per element (the
  longest parameter's count; shorter columns null past their end), ``step`` and ``loss``
  in the first row of each step and null below it.
* ``wide, repeated step``: the same with ``step`` and ``loss`` in every row,
  dictionary-encoded (what pandas reads as a tidy table).
* ``long``: ``step``, ``tensor`` (dictionary-encoded) and ``value`` per value.
* ``flat``: one non-null ``value`` column, step and loss in the footer (schema version 3),
  written by pyarrow alone as the others are, and by ``TraceWriter`` (its checks and its
  background thread included; the read is ``TraceReader.iter_steps``).

    .venv/bin/python bench/trace_layouts.py
"""

import os
import shutil
import statistics
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from common import bench_trace_meta, fresh_workdir, machine, scale_config, table

from parity.core import integrity
from parity.core.models import model_params
from parity.trace.reader import TraceReader
from parity.trace.schema import TraceLayout
from parity.trace.writer import TraceWriter

STEPS = 200
REPEAT = 3
OPTIONS = {
    "compression": "none",
    "use_dictionary": False,
    "write_statistics": False,
    "store_schema": False,
    **integrity.PARQUET_WRITE,
}


def values_of(model) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        n: rng.standard_normal(int(np.prod(s))).astype(np.float32) for n, s in model_params(model)
    }


def write_raw(path, values):
    step = b"".join(v.tobytes() for v in values.values())
    with open(path, "wb") as f:
        for _ in range(STEPS + 1):
            f.write(step)


def write_list(path, values):
    fields, columns = [pa.field("step", pa.int32(), False), pa.field("loss", pa.float64())], []
    for n, v in values.items():
        kind = pa.list_(pa.field("element", pa.float32(), nullable=False), v.size)
        fields.append(pa.field(n, kind, False))
        columns.append(pa.FixedSizeListArray.from_arrays(pa.array(v), type=kind))
    schema = pa.schema(fields)
    with pq.ParquetWriter(path, schema, **OPTIONS) as w:
        for s in range(STEPS + 1):
            head = [pa.array([s], pa.int32()), pa.array([None if s == 0 else 1.0], pa.float64())]
            w.write_table(pa.Table.from_arrays(head + columns, schema=schema))


def write_wide(path, values, repeated: bool):
    rows = max(v.size for v in values.values())
    nulls = {}

    def padded(array, kind):
        if len(array) == rows:
            return array
        key = (rows - len(array), str(kind))
        if key not in nulls:
            nulls[key] = pa.nulls(key[0], kind)
        return pa.chunked_array([array, nulls[key]], kind)

    if repeated:
        head = [
            pa.field("step", pa.dictionary(pa.int8(), pa.int32()), False),
            pa.field("loss", pa.dictionary(pa.int8(), pa.float64())),
        ]
        options = {**OPTIONS, "use_dictionary": ["step", "loss"]}
        zeros = pa.array(np.zeros(rows, np.int8))
        absent = pa.nulls(rows, pa.int8())  # step 0's loss: null in every row
    else:
        head = [pa.field("step", pa.int32()), pa.field("loss", pa.float64())]
        options = OPTIONS
    fields = head + [pa.field(n, pa.float32(), v.size < rows) for n, v in values.items()]
    schema = pa.schema(fields)
    data = [padded(pa.array(v), pa.float32()) for v in values.values()]
    with pq.ParquetWriter(path, schema, **options) as w:
        for s in range(STEPS + 1):
            loss = None if s == 0 else 1.0
            if repeated:
                step = pa.DictionaryArray.from_arrays(zeros, pa.array([s], pa.int32()))
                losses = pa.DictionaryArray.from_arrays(
                    absent if loss is None else zeros, pa.array([1.0], pa.float64())
                )
            else:
                step = padded(pa.array([s], pa.int32()), pa.int32())
                losses = padded(pa.array([loss], pa.float64()), pa.float64())
            w.write_table(pa.Table.from_arrays([step, losses, *data], schema=schema), rows)


def write_long(path, values):
    flat = np.concatenate(list(values.values()))
    names = pa.array(list(values))
    which = pa.array(
        np.repeat(np.arange(len(values), dtype=np.int8), [v.size for v in values.values()])
    )
    zeros = pa.array(np.zeros(flat.size, np.int8))
    schema = pa.schema(
        [
            pa.field("step", pa.dictionary(pa.int8(), pa.int32()), False),
            pa.field("tensor", pa.dictionary(pa.int8(), pa.string()), False),
            pa.field("value", pa.float32(), False),
        ]
    )
    options = {**OPTIONS, "use_dictionary": ["step", "tensor"]}
    tensor = pa.DictionaryArray.from_arrays(which, names)
    with pq.ParquetWriter(path, schema, **options) as w:
        for s in range(STEPS + 1):
            step = pa.DictionaryArray.from_arrays(zeros, pa.array([s], pa.int32()))
            cols = [step, tensor, pa.array(flat)]
            w.write_table(pa.Table.from_arrays(cols, schema=schema), flat.size)


def write_flat(path, values):
    schema = pa.schema([pa.field("value", pa.float32(), False)])
    chunks = pa.chunked_array([pa.array(v) for v in values.values()])
    rows = len(chunks)
    with pq.ParquetWriter(path, schema, **OPTIONS) as w:
        for _ in range(STEPS + 1):
            w.write_table(pa.Table.from_arrays([chunks], schema=schema), rows)


def write_trace_writer(path, values, model):
    layout = TraceLayout.of("f32", model_params(model))
    meta = bench_trace_meta(STEPS)
    with TraceWriter(path, layout, meta) as w:
        for s in range(STEPS + 1):
            # fresh arrays each step, as a runner hands them over
            w.write_step(s, None if s == 0 else 1.0, {n: v.copy() for n, v in values.items()})


def read_row_groups(path):
    f = pq.ParquetFile(path, page_checksum_verification=True)
    for g in range(f.num_row_groups):
        t = f.read_row_group(g, use_threads=False)
        for c in t.columns:
            for chunk in c.chunks:
                chunk.to_numpy(zero_copy_only=False)


def read_trace(path):
    for _ in TraceReader(path).iter_steps():
        pass


def main():
    model = scale_config()["experiments"]["scale_mlp"]["model"]
    values = values_of(model)
    layouts = {
        "raw": (write_raw, None),
        "list (schema 2)": (write_list, read_row_groups),
        "wide, first-row step": (lambda p, v: write_wide(p, v, False), read_row_groups),
        "wide, repeated step": (lambda p, v: write_wide(p, v, True), read_row_groups),
        "long": (write_long, read_row_groups),
        "flat, pyarrow alone": (write_flat, read_row_groups),
        "flat, TraceWriter": (lambda p, v: write_trace_writer(p, v, model), read_trace),
    }
    workdir = fresh_workdir("trace-layouts")
    written = {k: [] for k in layouts}
    read = {k: [] for k in layouts}
    size = {}
    try:
        for _ in range(REPEAT):
            for name, (write, reader) in layouts.items():
                path = workdir / "layout.parquet"
                start = time.perf_counter()
                write(path, values)
                written[name].append(time.perf_counter() - start)
                size[name] = path.stat().st_size
                if reader is not None:
                    start = time.perf_counter()
                    reader(path)
                    read[name].append(time.perf_counter() - start)
                os.remove(path)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    raw = statistics.median(written["raw"])
    rows = []
    for name in layouts:
        w = statistics.median(written[name])
        rows.append(
            {
                "layout": name,
                "write (s)": f"{w:.2f}",
                "÷ raw": f"{w / raw:.2f}",
                "per step (ms)": f"{1000 * w / (STEPS + 1):.1f}",
                "file (MB)": f"{size[name] / 1e6:.0f}",
                "read (s)": f"{statistics.median(read[name]):.2f}" if read[name] else "",
                "tries, write (s)": ", ".join(f"{t:.2f}" for t in written[name]),
            }
        )
    print(machine())
    count = sum(v.size for v in values.values())
    print(f"{STEPS + 1} steps of {count} float32 values; medians of {REPEAT}")
    print(table(rows, list(rows[0])))


if __name__ == "__main__":
    main()
