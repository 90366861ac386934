"""Recording every step against recording nothing (only the initial and last states), per
framework, on the scale experiment (1.86M parameters, 200 steps, float32): the ratio of
the training loops' wall times, which include writing the trace.

Target: ratio ≤ 1.25.

    .venv/bin/python bench/recording_overhead.py
"""

from common import WORK, machine, run_workflow, scale_config, table

from parity.experiments import RunKey
from parity.schema import TraceReader

STEPS = 200


def train_seconds(workdir, run, dtype, every):
    config = scale_config(every=every)
    key = RunKey("scale_mlp", run, dtype, "cpu")
    run_workflow(workdir, config, key.trace)
    return TraceReader(workdir / key.trace).meta["runner"]["train_seconds"]


def main():
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
            }
        )
    print(machine())
    print(table(rows, list(rows[0])))


if __name__ == "__main__":
    main()
