"""Whether two finished runs of the workflow produced the same results: every file under
``results/tables/`` compared byte for byte, and every trace under ``results/traces/``
compared by value (each recorded step's number, loss and every tensor's bytes, read with
``parity.trace.reader.TraceReader``; the metadata, which names the code version, host and
times, is not compared). Used to show that a performance lever changes no number.

    .venv/bin/python bench/compare_runs.py RUN_A RUN_B

RUN_A and RUN_B are working folders of finished runs (``bench/cold_workflow.py --keep``).
Prints the files only one run has, the tables that differ and the traces whose values
differ; exits 1 when a trace's values or a table other than those listed with
``--expect-differ`` differ.
"""

import argparse
import filecmp
import sys
from pathlib import Path

import numpy as np
from common import REPO  # noqa: F401  (puts scripts/ on sys.path)

from parity.trace.reader import TraceReader


def files(root: Path, folder: str, suffixes: tuple[str, ...]) -> set[str]:
    """Paths relative to ``root`` of the files under ``root/folder`` ending in a suffix."""
    base = root / folder
    return {str(p.relative_to(root)) for p in base.rglob("*") if p.name.endswith(suffixes)}


def same_values(a: Path, b: Path) -> str | None:
    """None when the traces ``a`` and ``b`` hold the same steps, losses and tensor bytes;
    else what differs first."""
    ra, rb = TraceReader(a), TraceReader(b)
    steps_a, steps_b = list(ra.iter_steps()), list(rb.iter_steps())
    if [s.step for s in steps_a] != [s.step for s in steps_b]:
        return "recorded steps differ"
    for sa, sb in zip(steps_a, steps_b, strict=True):
        if not (sa.loss == sb.loss or (sa.loss != sa.loss and sb.loss != sb.loss)):
            return f"loss at step {sa.step}: {sa.loss!r} vs {sb.loss!r}"
        if sorted(sa.tensors) != sorted(sb.tensors):
            return f"tensors at step {sa.step} differ in name"
        for name, x in sa.tensors.items():
            if x.dtype != sb.tensors[name].dtype or not np.array_equal(
                x.view(np.uint8), sb.tensors[name].view(np.uint8)
            ):
                return f"{name} at step {sa.step}"
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_a", type=Path)
    parser.add_argument("run_b", type=Path)
    parser.add_argument(
        "--expect-differ",
        nargs="*",
        default=[],
        help="table paths (relative to the run folder) expected to differ, e.g. provenance",
    )
    args = parser.parse_args()
    a, b = args.run_a, args.run_b
    tables_a, tables_b = (files(r, "results/tables", (".md", ".csv", ".html")) for r in (a, b))
    traces_a, traces_b = (files(r, "results/traces", (".parquet",)) for r in (a, b))
    only = sorted((tables_a ^ tables_b) | (traces_a ^ traces_b))
    differ = [t for t in sorted(tables_a & tables_b) if not filecmp.cmp(a / t, b / t, False)]
    unexpected = [t for t in differ if t not in args.expect_differ]
    bad_traces = {}
    for t in sorted(traces_a & traces_b):
        problem = same_values(a / t, b / t)
        if problem:
            bad_traces[t] = problem
    n_tables, n_traces = len(tables_a & tables_b), len(traces_a & traces_b)
    print(f"tables compared: {n_tables}, identical: {n_tables - len(differ)}")
    print(f"traces compared: {n_traces}, same values: {n_traces - len(bad_traces)}")
    for t in only:
        print(f"only in one run: {t}")
    for t in differ:
        print(f"table differs{'' if t in unexpected else ' (expected)'}: {t}")
    for t, problem in bad_traces.items():
        print(f"trace values differ: {t}: {problem}")
    return 1 if unexpected or bad_traces or only else 0


if __name__ == "__main__":
    sys.exit(main())
