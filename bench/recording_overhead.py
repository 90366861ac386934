"""Recording every step against recording nothing (only the initial and last states), per
framework, on the scale experiment (1.86M parameters, 200 steps, float32): the ratio of
the training loops' wall times (``train_seconds``, measured inside each runner), which
include writing the trace.

Target: ratio ≤ 1.15 for PyTorch and for candle.

Every run of this benchmark trains afresh: it works in a new folder (removed at the end)
and forces each timed training job to rerun, and it checks that each trace it reads was
written by the job it just ran. PyTorch and candle, recording every step and recording
nothing, are run interleaved ``REPEAT`` times; the table gives the medians and both
ratios side by side.

Also measured, ``LONG_REPEAT`` times each: the same runs with ``LONG_STEPS`` steps, whose
trace recording every step (6 GB in float32) is larger than the share of memory the
kernel lets stay dirty before it throttles the writer on a machine of this size (a tenth
of the available memory by default), so the ratio shows what a long recording costs where
the trace must reach the disk while the run goes on.

Also printed, to explain the ratios: the time to write the same bytes (every parameter of
every step, float32) raw to a file in the same folder, one step per write, and the time
:class:`parity.trace.writer.TraceWriter` takes to write the same steps as a trace (checks,
Parquet encoding and page checksums included), each with nothing else done and measured
once in every repeat beside the runs (on a shared machine they vary as much as the runs),
and the ratio each alone would give.

    .venv/bin/python bench/recording_overhead.py
"""

import os
import shutil
import statistics
import time

import numpy as np
from common import bench_trace_meta, fresh_workdir, machine, run_workflow, scale_config, table

from parity.core.models import count_params, model_params
from parity.plan.keys import RunKey
from parity.trace.reader import TraceReader
from parity.trace.schema import TraceLayout
from parity.trace.writer import TraceWriter

STEPS = 200
REPEAT = 5
LONG_STEPS = 800
LONG_REPEAT = 3
RULES = {"torch": "train_torch", "candle": "train_candle"}


def train_seconds(workdir, run, every, steps=STEPS):
    """``train_seconds`` of a fresh ``run`` (float32) of ``steps`` steps recording every
    ``every``-th step."""
    key = RunKey("scale_mlp", run, "f32", "cpu")
    config = scale_config(every=every)
    config["experiments"]["scale_mlp"]["steps"] = steps
    # The float64 trace of LONG_STEPS steps would pass the default cap; only float32 runs.
    config["limits"]["max_trace_bytes"] = max(config["limits"]["max_trace_bytes"], 16 << 30)
    started = time.time()
    run_workflow(workdir, config, key.trace, forcerun=(RULES[run],))
    trace = workdir / key.trace
    if trace.stat().st_mtime < started:
        raise RuntimeError(f"{trace} was not written by this run")
    meta = TraceReader(trace).meta
    assert meta["record_every"] == every, meta["record_every"]
    return meta["runner"]["train_seconds"]


def raw_write_seconds(workdir, params: int, steps: int) -> float:
    """Seconds to write ``steps`` + 1 buffers of ``params`` float32 values to one file in
    ``workdir`` (through the page cache, as the trace writers do) and close it; the file is
    removed after. Varies a lot with the kernel's writeback of earlier dirty pages."""
    step = np.random.default_rng(0).standard_normal(params).astype(np.float32).tobytes()
    path = workdir / "raw-write.bin"
    start = time.perf_counter()
    with open(path, "wb") as f:
        for _ in range(steps + 1):  # steps 0..STEPS, as a trace records them
            f.write(step)
    seconds = time.perf_counter() - start
    os.remove(path)
    return seconds


def trace_write_seconds(workdir, model, steps: int) -> float:
    """Seconds :class:`TraceWriter` takes to write ``steps`` + 1 float32 steps of
    ``model``'s parameters (every step recorded, each step's arrays fresh, as a runner
    hands them over) to a trace in ``workdir`` and close it; removed after."""
    layout = TraceLayout.of("f32", model_params(model))
    rng = np.random.default_rng(0)
    values = {n: rng.standard_normal(layout.numel(n)).astype(np.float32) for n in layout.names}
    meta = bench_trace_meta(steps)
    path = workdir / "trace-write.parquet"
    start = time.perf_counter()
    with TraceWriter(path, layout, meta) as w:
        for step in range(steps + 1):
            w.write_step(step, None if step == 0 else 1.0, {n: v.copy() for n, v in values.items()})
    seconds = time.perf_counter() - start
    os.remove(path)
    return seconds


def main():
    model = scale_config()["experiments"]["scale_mlp"]["model"]
    workdir = fresh_workdir("recording-overhead")
    times = {(run, every): [] for run in RULES for every in (1, STEPS)}
    longs = {(run, every): [] for run in RULES for every in (1, LONG_STEPS)}
    raws, writers = [], []
    try:
        for _ in range(REPEAT):
            raws.append(raw_write_seconds(workdir, count_params(model), STEPS))
            writers.append(trace_write_seconds(workdir, model, STEPS))
            for run in RULES:
                for every in (1, STEPS):
                    times[run, every].append(train_seconds(workdir, run, every))
        for _ in range(LONG_REPEAT):
            for run in RULES:
                for every in (1, LONG_STEPS):
                    longs[run, every].append(train_seconds(workdir, run, every, LONG_STEPS))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in times.items()}
    raw, writer = statistics.median(raws), statistics.median(writers)
    ratio = {run: med[run, 1] / med[run, STEPS] for run in RULES}
    print(machine())
    print(f"{REPEAT} interleaved runs each; every figure a median")
    row = {"": "record every step ÷ record nothing"}
    for run in RULES:
        row[run] = f"{med[run, 1]:.2f} s ÷ {med[run, STEPS]:.2f} s = **{ratio[run]:.2f}**"
    rows = [
        row,
        {"": "target", **{run: "≤ 1.15" for run in RULES}},
        {
            "": f"ratio if the raw write of the same bytes ({raw:.2f} s) were all",
            **{run: f"{(med[run, STEPS] + raw) / med[run, STEPS]:.2f}" for run in RULES},
        },
        {
            "": f"ratio if TraceWriter alone ({writer:.2f} s) were all, not overlapped",
            **{run: f"{(med[run, STEPS] + writer) / med[run, STEPS]:.2f}" for run in RULES},
        },
        {
            "": "each run, record every step (s)",
            **{run: ", ".join(f"{t:.2f}" for t in times[run, 1]) for run in RULES},
        },
        {
            "": "each run, record nothing (s)",
            **{run: ", ".join(f"{t:.2f}" for t in times[run, STEPS]) for run in RULES},
        },
    ]
    long_med = {k: statistics.median(v) for k, v in longs.items()}
    rows.append(
        {
            "": f"{LONG_STEPS} steps ({LONG_REPEAT} runs each): record every step ÷ nothing",
            **{
                run: f"{long_med[run, 1]:.2f} s ÷ {long_med[run, LONG_STEPS]:.2f} s = "
                f"**{long_med[run, 1] / long_med[run, LONG_STEPS]:.2f}**"
                for run in RULES
            },
        }
    )
    for every, what in ((1, "record every step"), (LONG_STEPS, "record nothing")):
        rows.append(
            {
                "": f"each run of {LONG_STEPS} steps, {what} (s)",
                **{run: ", ".join(f"{t:.2f}" for t in longs[run, every]) for run in RULES},
            }
        )
    print(table(rows, ["", *RULES]))
    print("each try, raw write (s):", ", ".join(f"{t:.2f}" for t in raws))
    print("each try, TraceWriter alone (s):", ", ".join(f"{t:.2f}" for t in writers))


if __name__ == "__main__":
    main()
