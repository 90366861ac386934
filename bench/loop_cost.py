"""The cost of the training loop's parts per step (docs/loop.md), PyTorch and candle, on the
scale experiment (1.86M parameters, AdamW, 200 steps, recording the first and last states
only), float32, one thread: the same run without a loop, with the loop's scalars only (one
parameter group: each step's learning rate and total gradient norm are recorded, nothing
else changes), with a schedule, norm clipping and two parameter groups, and with those and
four accumulated micro-batches (four forward and backward passes per step). Each figure is
the median of ``--repeat`` runs of the job, interleaved; the train_seconds the runner
records (the steps and their recording, no start-up). A figure users ask for; no target.

    .venv/bin/python bench/loop_cost.py [--repeat 3] [--frameworks torch candle]
        [--variants "no loop" "scalars only" …]
"""

from __future__ import annotations

import argparse
import statistics

from common import WORK, machine, run_workflow, scale_config, table

from parity.plan.keys import RunKey
from parity.trace.reader import TraceReader

STEPS = 200

#: The loop of each variant, as a run's override (docs/loop.md).
LOOP = {
    "schedule": {
        "name": "get_cosine_schedule_with_warmup",
        "num_warmup_steps": 20,
        "num_training_steps": STEPS,
    },
    "clip": {"norm": 1.0},
    "param_groups": [{"params": ["*.bias"], "weight_decay": 0.0}, {}],
}
VARIANTS = {
    "no loop": {},
    "scalars only": {"param_groups": [{}]},
    "schedule + clip + 2 groups": LOOP,
    "… + accumulate 4": {**LOOP, "accumulate": 4},
}
SUFFIX = dict(zip(VARIANTS, ("", "_scalars", "_loop", "_acc"), strict=True))


def config() -> dict:
    """The scale experiment with one run per framework and variant, recording the first and
    last states only."""
    c = scale_config(every=STEPS)
    exp = c["experiments"]["scale_mlp"]
    exp["runs"] = {
        f"{fw}{SUFFIX[v]}": dict(override)
        for fw in ("torch", "candle")
        for v, override in VARIANTS.items()
    }
    exp["comparisons"] = {
        f"main{SUFFIX[v] or ''}": {
            "reference": f"torch{SUFFIX[v]}",
            "candidate": f"candle{SUFFIX[v]}",
        }
        for v in VARIANTS
    }
    c["dtypes"] = ["f32"]
    return c


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--frameworks", nargs="+", default=["torch", "candle"])
    parser.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS))
    args = parser.parse_args()
    if "no loop" not in args.variants:
        parser.error("the variants are measured against 'no loop': include it")
    workdir = WORK / "loop-cost"
    cfg = config()
    keys = {
        (fw, v): RunKey("scale_mlp", f"{fw}{SUFFIX[v]}", "f32", "cpu")
        for fw in args.frameworks
        for v in args.variants
    }
    seconds = {k: [] for k in keys}
    for i in range(args.repeat):
        # every run once per round, all of them again from the second round on
        force = tuple(f"train_{fw}" for fw in args.frameworks) if i else ()
        # the runs of a round in turns, so a slow spell falls on every variant alike
        order = list(keys.values())
        order = order[i % len(order) :] + order[: i % len(order)]
        for key in order:
            run_workflow(workdir, cfg, key.trace, forcerun=force)
        for k, key in keys.items():
            meta = TraceReader(workdir / key.trace).meta
            assert meta["runner"]["threads"] == 1, meta["runner"]
            seconds[k].append(meta["runner"]["train_seconds"])
    rows = []
    for v in args.variants:
        row = {"variant": v}
        for fw in args.frameworks:
            ms = 1000 * statistics.median(seconds[(fw, v)]) / STEPS
            base = 1000 * statistics.median(seconds[(fw, "no loop")]) / STEPS
            row[f"{fw} ms/step"] = f"{ms:.2f}"
            row[f"{fw} ÷ no loop"] = f"{ms / base:.3f}"
        rows.append(row)
    print(machine())
    print(f"scale_mlp, f32, {STEPS} steps, median of {args.repeat} runs each")
    print(table(rows, list(rows[0])))


if __name__ == "__main__":
    main()
