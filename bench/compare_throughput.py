"""Comparing the scale experiment's four traces (the float64 split: torch and candle,
f32 and f64) with the workflow's streaming comparison, against numpy's
max(abs(a - b)) on the same arrays already in memory.

Targets: throughput ratio (numpy time / our time) ≥ 0.8; peak memory of the streaming
comparison ≤ 2 × one step's data of the four traces + 300 MB.

Ours runs in a child process per try (its peak memory is that process's); numpy's runs
here. The two alternate ``REPEAT`` times and the figures are medians (peak: the largest).
The traces are the workflow's (made, or remade when out of date, in ``WORKDIR``); only the
comparison is timed.

    .venv/bin/python bench/compare_throughput.py
"""

import json
import statistics
import subprocess
import sys
import time

import numpy as np
from common import REPO, WORK, machine, run_workflow, scale_config, table

from parity.plan.plan import Plan
from parity.trace.reader import TraceReader

WORKDIR = WORK / "scale"
REPEAT = 5

CHILD = r"""
import json, resource, sys, time
sys.path.insert(0, sys.argv[1])
from parity.compare import maths as compare
from parity.trace.reader import TraceReader
import numpy, pyarrow.parquet

def mb(field):
    # this process's own figures: ru_maxrss would count the pages of the parent it was
    # forked from (which holds numpy's copy of the traces)
    try:
        with open("/proc/self/status") as f:
            return next(int(l.split()[1]) for l in f if l.startswith(field + ":")) / 1024
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

base_mb = mb("VmRSS")
start = time.perf_counter()
rows = compare.split(*(TraceReader(p) for p in sys.argv[2:6]))
seconds = time.perf_counter() - start
print(json.dumps({"seconds": seconds, "steps": len(rows), "base_mb": base_mb,
                  "peak_mb": mb("VmHWM")}))
"""


def main():
    config = scale_config()
    plan = Plan(config)
    comp = plan.comparison("scale_mlp", "cpu")
    keys = [comp.reference, comp.candidate, *comp.f64_pair]
    run_workflow(WORKDIR, config, *[k.trace for k in keys], cores=2)
    paths = [str(WORKDIR / k.trace) for k in keys]

    # numpy on the same data, all of it loaded first (not timed)
    readers = [TraceReader(p) for p in paths]
    names = readers[0].layout.names
    steps = [
        [np.concatenate([r.tensors[n] for n in names]) for r in reader.iter_steps()]
        for reader in readers
    ]
    r32, c32, r64, c64 = steps
    tries, numpy_tries = [], []
    for _ in range(REPEAT):
        out = subprocess.run(
            [sys.executable, "-c", CHILD, str(REPO / "scripts"), *paths],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        tries.append(json.loads(out))
        start = time.perf_counter()
        for a, b, c, d in zip(r32, c32, r64, c64, strict=True):
            a64, b64 = a.astype(np.float64), b.astype(np.float64)
            np.max(np.abs(a64 - b64))
            np.max(np.abs(a64 - c))
            np.max(np.abs(b64 - d))
            np.max(np.abs(c - d))
        numpy_tries.append(time.perf_counter() - start)
    ours = {
        "seconds": statistics.median(t["seconds"] for t in tries),
        "steps": tries[0]["steps"],
        "peak_mb": max(t["peak_mb"] for t in tries),
        "base_mb": max(t["base_mb"] for t in tries),
    }
    numpy_s = statistics.median(numpy_tries)
    one_step_mb = sum(s[0].nbytes for s in steps) / 2**20
    print(machine())
    print(
        f"{len(names)} tensors, {r32[0].size} parameters, {ours['steps']} recorded steps, "
        f"one step of the four traces = {one_step_mb:.0f} MB"
    )
    row = {
        "ours (s)": f"{ours['seconds']:.2f}",
        "numpy in memory (s)": f"{numpy_s:.2f}",
        "throughput ratio": f"{numpy_s / ours['seconds']:.2f}",
        "target": "≥ 0.8",
        "peak memory (MB)": f"{ours['peak_mb']:.0f}",
        "of which Python and libraries (MB)": f"{ours['base_mb']:.0f}",
        "memory target (MB)": f"{2 * one_step_mb + 300:.0f}",
    }
    print(table([row], list(row)))
    print("tries, ours (s):", ", ".join(f"{t['seconds']:.2f}" for t in tries))
    print("tries, numpy (s):", ", ".join(f"{t:.2f}" for t in numpy_tries))


if __name__ == "__main__":
    main()
