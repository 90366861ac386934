"""Recording every step against recording nothing (only the initial and last states), per
framework, on the scale experiment (1.86M parameters, 200 steps, float32): the ratio of
the training loops' wall times, which include writing the trace.

Target: ratio ≤ 1.25.

Also printed, to explain the ratio: the time to write the same bytes (every parameter of
every step, float32) raw to a file in the same folder, one step per write, and the time
pyarrow takes to write the same rows as the trace's Parquet (the trace's schema and writer
options, one row per row group, as TraceWriter writes steps of this size), each with
nothing else done, and the ratio each alone would give.

    .venv/bin/python bench/recording_overhead.py
"""

import os
import statistics
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from common import WORK, machine, run_workflow, scale_config, table

from parity.keys import RunKey
from parity.models import count_params, model_params
from parity.schema import FLOAT_TYPES, TraceLayout, TraceReader, writer_options

STEPS = 200


def train_seconds(workdir, run, dtype, every):
    config = scale_config(every=every)
    key = RunKey("scale_mlp", run, dtype, "cpu")
    run_workflow(workdir, config, key.trace)
    return TraceReader(workdir / key.trace).meta["runner"]["train_seconds"]


def raw_write_seconds(params: int, steps: int, repeat: int = 5) -> float:
    """Median seconds to write ``steps`` + 1 buffers of ``params`` float32 values to one
    file under WORK (through the page cache, as the trace writers do) and close it; the
    file is removed after each try. Varies a lot with the kernel's writeback of earlier
    dirty pages, hence the median."""
    step = np.random.default_rng(0).standard_normal(params).astype(np.float32).tobytes()
    path = WORK / "raw-write.bin"
    WORK.mkdir(parents=True, exist_ok=True)
    tries = []
    for _ in range(repeat):
        start = time.perf_counter()
        with open(path, "wb") as f:
            for _ in range(steps + 1):  # steps 0..STEPS, as a trace records them
                f.write(step)
        tries.append(time.perf_counter() - start)
        os.remove(path)
    return statistics.median(tries)


def parquet_write_seconds(model, steps: int, repeat: int = 3) -> float:
    """Median seconds pyarrow takes to write ``steps`` + 1 float32 rows of ``model``'s
    parameters as a trace's Parquet (schema and options of parity.schema), one row per row
    group, to a file under WORK; the file is removed after each try."""
    layout = TraceLayout.of("f32", model_params(model))
    rng = np.random.default_rng(0)
    columns = [pa.array([1], pa.int32()), pa.array([1.0], pa.float64())] + [
        pa.FixedSizeListArray.from_arrays(
            pa.array(rng.standard_normal(layout.numel(n)).astype(np.float32), FLOAT_TYPES["f32"]),
            type=layout.list_type(n),
        )
        for n in layout.names
    ]
    row = pa.Table.from_arrays(columns, schema=layout.arrow_schema())
    path = WORK / "parquet-write.parquet"
    tries = []
    for _ in range(repeat):
        start = time.perf_counter()
        writer = pq.ParquetWriter(path, row.schema, **writer_options(layout))
        for _ in range(steps + 1):
            writer.write_table(row)
        writer.close()
        tries.append(time.perf_counter() - start)
        os.remove(path)
    return statistics.median(tries)


def main():
    model = scale_config()["experiments"]["scale_mlp"]["model"]
    raw = raw_write_seconds(count_params(model), STEPS)
    parquet = parquet_write_seconds(model, STEPS)
    rows = []
    for run in ("torch", "candle"):
        everything = train_seconds(WORK / "record-every-step", run, "f32", 1)
        nothing = train_seconds(WORK / "record-nothing", run, "f32", STEPS)
        rows.append(
            {
                "framework": run,
                "record every step (s)": f"{everything:.2f}",
                "record nothing (s)": f"{nothing:.2f}",
                "ratio": f"{everything / nothing:.2f}",
                "target": "≤ 1.25",
                "raw write of the same bytes (s)": f"{raw:.2f}",
                "ratio, raw write alone": f"{(nothing + raw) / nothing:.2f}",
                "Parquet write of the same rows (s)": f"{parquet:.2f}",
                "ratio, Parquet write alone": f"{(nothing + parquet) / nothing:.2f}",
            }
        )
    print(machine())
    print(table(rows, list(rows[0])))


if __name__ == "__main__":
    main()
