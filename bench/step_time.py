"""Training step time, candle ÷ PyTorch, on the scale experiment (1.86M parameters,
200 steps, recording only the first and last states), one thread each, float32 and
float64. A figure users ask for; no target.

    .venv/bin/python bench/step_time.py
"""

from common import WORK, machine, run_workflow, scale_config, table

from parity.plan.keys import RunKey
from parity.trace.reader import TraceReader

STEPS = 200


def ms_per_step(run, dtype):
    workdir = WORK / "record-nothing"
    key = RunKey("scale_mlp", run, dtype, "cpu")
    run_workflow(workdir, scale_config(every=STEPS), key.trace)
    meta = TraceReader(workdir / key.trace).meta
    assert meta["runner"]["threads"] == 1, meta["runner"]
    return 1000 * meta["runner"]["train_seconds"] / STEPS


def main():
    rows = []
    for dtype in ("f32", "f64"):
        torch_ms, candle_ms = ms_per_step("torch", dtype), ms_per_step("candle", dtype)
        rows.append(
            {
                "dtype": dtype,
                "PyTorch (ms/step)": f"{torch_ms:.1f}",
                "candle (ms/step)": f"{candle_ms:.1f}",
                "candle ÷ PyTorch": f"{candle_ms / torch_ms:.2f}",
            }
        )
    print(machine())
    print(table(rows, list(rows[0])))


if __name__ == "__main__":
    main()
