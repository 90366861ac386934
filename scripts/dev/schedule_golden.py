#!/usr/bin/env python3
"""Writes rust/parity-common/src/schedule/golden.json: the learning rates (and OneCycleLR's
momenta) PyTorch's schedulers set, index by index, for the schedules parity_common::schedule
mirrors, as the 16 hex digits of each float64's bit pattern. The Rust tests hold
parity_common::schedule::Scheduler to them bit for bit; tests/test_loop.py holds this file
to what the installed torch and transformers compute.

    .venv/bin/python scripts/dev/schedule_golden.py          # rewrite the file
    .venv/bin/python scripts/dev/schedule_golden.py --check  # exit 1 when it is stale
"""

from __future__ import annotations

import json
import struct
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))

OUT = REPO / "rust" / "parity-common" / "src" / "schedule" / "golden.json"
#: The groups' learning rates and the indices each schedule is stepped through.
BASE_LRS = [0.1, 0.003]
INDICES = 30
#: Each case: (name, the schedule as the run spec's kind holds it, optimizer).
CASES = [
    ("step", {"name": "StepLR", "step_size": 4, "gamma": 0.5}, "sgd"),
    ("multistep", {"name": "MultiStepLR", "milestones": [3, 7, 8, 20], "gamma": 0.3}, "sgd"),
    ("exponential", {"name": "ExponentialLR", "gamma": 0.9}, "sgd"),
    ("cosine", {"name": "CosineAnnealingLR", "T_max": 7, "eta_min": 0.0001}, "sgd"),
    ("cosine_long", {"name": "CosineAnnealingLR", "T_max": 100, "eta_min": 0.0}, "sgd"),
    (
        "linear",
        {"name": "LinearLR", "start_factor": 1.0 / 3, "end_factor": 1.0, "total_iters": 5},
        "sgd",
    ),
    (
        "linear_down",
        {"name": "LinearLR", "start_factor": 1.0, "end_factor": 0.0, "total_iters": 12},
        "sgd",
    ),
    (
        "onecycle",
        {
            "name": "OneCycleLR",
            "max_lr": 0.05,
            "total_steps": 40,
            "pct_start": 0.3,
            "anneal_strategy": "cos",
            "cycle_momentum": True,
            "base_momentum": 0.85,
            "max_momentum": 0.95,
            "div_factor": 25.0,
            "final_div_factor": 1e4,
            "three_phase": False,
        },
        "adamw",
    ),
    (
        "onecycle_linear_three",
        {
            "name": "OneCycleLR",
            "max_lr": 0.2,
            "total_steps": 30,
            "pct_start": 0.25,
            "anneal_strategy": "linear",
            "cycle_momentum": True,
            "base_momentum": 0.8,
            "max_momentum": 0.9,
            "div_factor": 10.0,
            "final_div_factor": 100.0,
            "three_phase": True,
        },
        "sgd",
    ),
    (
        "warmup_cosine",
        {
            "name": "SequentialLR",
            "milestones": [5],
            "schedulers": [
                {"name": "LinearLR", "start_factor": 0.1, "end_factor": 1.0, "total_iters": 5},
                {"name": "CosineAnnealingLR", "T_max": 20, "eta_min": 0.0},
            ],
        },
        "sgd",
    ),
    (
        "three_stages",
        {
            "name": "SequentialLR",
            "milestones": [4, 12],
            "schedulers": [
                {"name": "ExponentialLR", "gamma": 1.2},
                {"name": "StepLR", "step_size": 3, "gamma": 0.5},
                {"name": "CosineAnnealingLR", "T_max": 9, "eta_min": 0.001},
            ],
        },
        "sgd",
    ),
    (
        "hf_cosine",
        {
            "name": "get_cosine_schedule_with_warmup",
            "num_warmup_steps": 4,
            "num_training_steps": 25,
            "num_cycles": 0.5,
        },
        "adamw",
    ),
    (
        "hf_linear",
        {
            "name": "get_linear_schedule_with_warmup",
            "num_warmup_steps": 3,
            "num_training_steps": 20,
        },
        "adamw",
    ),
]


def bits(x: float) -> str:
    return struct.pack(">d", float(x)).hex()


def golden() -> dict:
    import torch

    from parity.train.loop import make_scheduler

    out = {"base_lrs": [bits(b) for b in BASE_LRS], "cases": []}
    for name, kind, opt_name in CASES:
        params = [torch.nn.Parameter(torch.zeros(1)) for _ in BASE_LRS]
        groups = [{"params": [p], "lr": lr} for p, lr in zip(params, BASE_LRS, strict=True)]
        if opt_name == "sgd":
            opt = torch.optim.SGD(groups, lr=BASE_LRS[0])
        else:
            opt = torch.optim.AdamW(groups, lr=BASE_LRS[0])
        sched = make_scheduler(opt, kind)
        lrs, momenta = [], []
        for i in range(INDICES + 1):
            lrs.append([bits(g["lr"]) for g in opt.param_groups])
            key = "momentum" if opt_name == "sgd" else "betas"
            momenta.append(
                [bits(g[key] if key == "momentum" else g[key][0]) for g in opt.param_groups]
            )
            if kind["name"] == "OneCycleLR" and i == kind["total_steps"]:
                break
            opt.step()
            sched.step()
        out["cases"].append(
            {"name": name, "kind": kind, "optimizer": opt_name, "lrs": lrs, "momenta": momenta}
        )
    return out


def main() -> int:
    text = json.dumps(golden(), indent=1) + "\n"
    if "--check" in sys.argv:
        if OUT.read_text(encoding="utf-8") != text:
            print(f"{OUT} is stale: rerun {Path(__file__).name}", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
