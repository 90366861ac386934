"""What recording every step costs the PyTorch scale job, part by part: the job's own
training loop (``parity.train.torch.train``, 200 steps, float32, one thread, copies made
beside the next step as in the workflow) run in this process with its trace writer swapped
for writers that do only part of the work, on the same step copies, on one thread beside
the run as :class:`parity.trace.writer.TraceWriter`'s writer thread does:

- ``nothing``: ``TraceWriter``, recording only the first and the last step (the baseline of
  ``recording_overhead.py``);
- ``copies``: every step copied out of torch, the copies handed over and dropped;
- ``memcopy``: every step's bytes copied once more, into one buffer kept for the run: the
  same bytes moved through memory, no file;
- ``raw``: every step's bytes written raw to a file in the same folder, one write per array,
  through the page cache and written back as the file grows (``parity.core.fileio.Writeback``,
  as ``TraceWriter`` does): what writing these bytes costs in any file format;
- ``direct``: the same bytes written raw past the page cache (``O_DIRECT``, Linux): copied
  into one page-aligned buffer, written in whole 4 KiB blocks; the lever measured, not used
  (docs/performance.md says why);
- ``trace``: ``TraceWriter``, every step (what the workflow's job does).

Each is run ``REPEAT`` times, interleaved in a new random order each round; the table gives
the median ``train_seconds`` (the loop's wall time, as the runner measures it) and its ratio
to ``nothing``. Where ``raw`` costs about what ``trace`` does, the cost is writing the
bytes, not the trace format; where ``memcopy`` does too, it is the memory traffic beside
the run on a machine whose cores share memory bandwidth (docs/performance.md, "what a step's
bytes cost beside the run").

The process runs with the allocator setting of the workflow's training jobs
(``parity.core.warm.MALLOC_TUNABLES``), re-executing itself with it where
``GLIBC_TUNABLES`` is unset.

``--fork`` runs each training run in a child forked from this process after it has imported
what the warm server imports (``parity.core.warm.PRELOAD``), as the workflow's job runs: a
fresh process, whose first calls into a library pay what a long-lived one paid once. It adds
three columns, medians over the runs: the wall time of the first 10 steps, the median step
after step 50 (each step timed at its loss call), and the child's minor page faults.

    .venv/bin/python bench/recording_floor.py [--fork]
"""

from __future__ import annotations

import itertools
import json
import logging
import mmap
import os
import random
import resource
import shutil
import statistics
import sys
import time
import traceback
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import ClassVar

import numpy as np
from common import fresh_workdir, machine, run_workflow, scale_config, table

from parity.core import paths
from parity.core.fileio import Writeback
from parity.core.warm import MALLOC_TUNABLES

STEPS = 200
REPEAT = 7
VARIANTS = ("nothing", "copies", "memcopy", "raw", "direct", "trace")
#: Steps a stand-in writer lets wait for its thread, as TraceWriter does with row groups
#: (a scale step is one row group).
QUEUED = 2


class Beside:
    """A stand-in for ``TraceWriter`` with the interface ``train`` uses: each recorded step's
    arrays go to one thread beside the run, where :meth:`work` does with them what the
    variant measures; at most :data:`QUEUED` steps wait for it. Publishes nothing; keeps the
    run's ``train_seconds`` in :attr:`seconds` once the run ends."""

    seconds: ClassVar[list[float]] = []

    def __init__(self, path, layout, meta):
        self.path = Path(path)
        self.meta = {**meta, "runner": dict(meta["runner"]), "status": "complete"}
        self._pool = ThreadPoolExecutor(1, "bench-writer")
        self._pending: list[Future] = []

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        for f in self._pending:
            f.result()
        self._pool.shutdown()
        self.finish()
        if exc_type is None:
            Beside.seconds.append(self.meta["runner"]["train_seconds"])

    def write_step(self, step, loss, tensors, handed_over=False):
        arrays = [np.asarray(v).reshape(-1) for v in tensors.values()]
        while len(self._pending) >= QUEUED:
            self._pending.pop(0).result()
        self._pending.append(self._pool.submit(self.work, arrays))

    def work(self, arrays: list[np.ndarray]) -> None:
        """``copies``: nothing; the arrays are dropped."""

    def finish(self) -> None:
        """After the last step's work."""


class MemCopy(Beside):
    def __init__(self, path, layout, meta):
        super().__init__(path, layout, meta)
        self._into = np.empty(0, np.uint8)  # grown to the largest array, kept for the run

    def work(self, arrays):
        for a in arrays:
            data = a.view(np.uint8)
            if self._into.size < data.size:
                self._into = np.empty(data.size, np.uint8)
            np.copyto(self._into[: data.size], data)


class RawWrite(Beside):
    def __init__(self, path, layout, meta):
        super().__init__(path, layout, meta)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        self._writeback = Writeback(self.path)

    def work(self, arrays):
        for a in arrays:
            view = memoryview(a).cast("B")
            while view:
                view = view[os.write(self._fd, view) :]
        self._writeback.advance()

    def close_file(self) -> None:
        """Close the file, leaving it in place."""
        self._writeback.close()
        os.close(self._fd)

    def finish(self):
        self.close_file()
        self.path.unlink()


class DirectWrite(RawWrite):
    BLOCK = 4096

    def __init__(self, path, layout, meta):
        super().__init__(path, layout, meta)
        self._direct = os.open(self.path, os.O_WRONLY | os.O_DIRECT)  # OSError: unsupported
        self._buffer = mmap.mmap(-1, 16 << 20)  # page-aligned
        self._filled = 0
        self._written = 0  # bytes written to the file

    def work(self, arrays):
        buf = np.frombuffer(self._buffer, np.uint8)
        for a in arrays:
            data = a.view(np.uint8)
            while data.size:
                n = min(data.size, buf.size - self._filled)
                buf[self._filled : self._filled + n] = data[:n]
                self._filled, data = self._filled + n, data[n:]
                whole = self._filled // self.BLOCK * self.BLOCK
                if self._filled == buf.size or (whole and data.size == 0):
                    if os.write(self._direct, memoryview(self._buffer)[:whole]) != whole:
                        raise OSError(f"{self.path}: a short O_DIRECT write")
                    self._written += whole
                    rest = self._filled - whole
                    buf[:rest] = buf[whole : self._filled]
                    self._filled = rest

    def close_file(self):
        """Write what is left of the last block through the page cache, close the file."""
        os.pwrite(self._fd, memoryview(self._buffer)[: self._filled], self._written)
        os.close(self._direct)
        self._buffer.close()
        super().close_file()


def timed_trace_writer():
    """``TraceWriter`` that keeps the run's ``train_seconds`` in :attr:`Beside.seconds`."""
    from parity.trace.writer import TraceWriter

    class Timed(TraceWriter):
        def close(self):
            super().close()
            Beside.seconds.append(self.meta["runner"]["train_seconds"])

    return Timed


def settings_and_fixture(workdir: Path) -> tuple[dict, str]:
    """The scale experiment's resolved PyTorch settings (``STEPS`` steps) and its fixture,
    made by the workflow in ``workdir``."""
    from snakemake.utils import validate

    from parity.plan.plan import Plan

    config = scale_config(every=1)
    config["experiments"]["scale_mlp"]["steps"] = STEPS
    fixture = paths.FIXTURE.format(experiment="scale_mlp")
    run_workflow(workdir, config, fixture)
    validate(config, str(Path(__file__).resolve().parents[1] / "schemas/config.schema.json"))
    settings = Plan(config, workdir=str(workdir)).run_settings("scale_mlp", "torch")
    return settings, str(workdir / fixture)


def main():
    if "GLIBC_TUNABLES" not in os.environ:  # as the workflow's training jobs run
        os.execve(
            sys.executable,
            [sys.executable, *sys.argv],
            {**os.environ, "GLIBC_TUNABLES": MALLOC_TUNABLES},
        )
    fork = "--fork" in sys.argv[1:]
    if fork:
        from parity.core.warm import PRELOAD

        for module in PRELOAD:
            __import__(module)
    from parity.plan.keys import RunKey
    from parity.train import torch as runner

    writers = {
        "nothing": timed_trace_writer(),
        "copies": Beside,
        "memcopy": MemCopy,
        "raw": RawWrite,
        "direct": DirectWrite,
        "trace": timed_trace_writer(),
    }
    log = logging.getLogger("recording_floor")
    key = RunKey("scale_mlp", "torch", "f32", "cpu")
    workdir = fresh_workdir("recording-floor")
    runs = {v: [] for v in VARIANTS}
    try:
        settings, fixture = settings_and_fixture(workdir)
        for _ in range(REPEAT):
            for variant in random.sample(VARIANTS, len(VARIANTS)):
                s = {**settings, "record": {**settings["record"], "every": 1}}
                if variant == "nothing":
                    s["record"]["every"] = STEPS
                out = workdir / f"floor-{variant}.parquet"

                def one_run(variant=variant, s=s, out=out):
                    runner.train(key, s, fixture, str(out), 1, log, writer=writers[variant])
                    out.unlink(missing_ok=True)
                    return {"seconds": Beside.seconds.pop()}

                runs[variant].append(in_a_child(runner, one_run) if fork else one_run())
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    def median(v, field):
        return statistics.median(r[field] for r in runs[v])

    base = median("nothing", "seconds")
    print(machine())
    where = "each run in a forked child" if fork else "in one process"
    print(f"PyTorch scale job, {STEPS} steps, float32, {where}; {REPEAT} interleaved runs each")
    columns = ["recording", "median (s)", "÷ nothing"]
    if fork:
        columns += ["first 10 steps (ms)", "step after 50 (ms)", "minor faults"]
    rows = [
        {
            "recording": v,
            "median (s)": f"{median(v, 'seconds'):.2f}",
            "÷ nothing": f"**{median(v, 'seconds') / base:.2f}**",
            "each run (s)": ", ".join(f"{r['seconds']:.2f}" for r in runs[v]),
            **(
                {
                    "first 10 steps (ms)": f"{1e3 * median(v, 'first10'):.0f}",
                    "step after 50 (ms)": f"{1e3 * median(v, 'step'):.2f}",
                    "minor faults": f"{median(v, 'minflt'):.0f}",
                }
                if fork
                else {}
            ),
        }
        for v in VARIANTS
    ]
    print(table(rows, [*columns, "each run (s)"]))


def in_a_child(runner, one_run) -> dict:
    """``one_run()``'s result, run in a forked child with each step's start timed (the
    runner's ``loss_fn`` wrapped): adds ``first10`` (seconds of steps 1-10), ``step`` (the
    median step after step 50) and ``minflt`` (the child's minor page faults). Raises
    ``RuntimeError`` if the child fails."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: reports on the pipe, never returns
        status = 1
        try:
            os.close(read)
            starts, loss_fn = [], runner.loss_fn

            def timed(*args):
                starts.append(time.perf_counter())
                return loss_fn(*args)

            runner.loss_fn = timed
            faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            result = one_run()
            result["minflt"] = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
            result["first10"] = starts[10] - starts[0]
            result["step"] = statistics.median(b - a for a, b in itertools.pairwise(starts[50:]))
            os.write(write, json.dumps(result).encode())
            status = 0
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(status)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        data = pipe.read()
    _, status = os.waitpid(pid, 0)
    if status != 0 or not data:
        raise RuntimeError(f"a forked training run failed (wait status {status})")
    return json.loads(data)


if __name__ == "__main__":
    main()
