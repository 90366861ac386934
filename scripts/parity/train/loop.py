"""The PyTorch side of the training loop beyond the optimizer's update (docs/loop.md), as a
PyTorch user writes it: the optimizer over its parameter groups, the scheduler by its class
(``torch.optim.lr_scheduler``; transformers' two warm-up schedules), gradient clipping with
``torch.nn.utils``, and the scalars a step records (each group's learning rate, the total
gradient norm before clipping, the clip coefficient).

Imported by the PyTorch runner (:mod:`parity.train.torch`) and by the probes' PyTorch side
(:mod:`parity.probe.torch_optim`, the optimizer only); torch is imported by the caller's
process already.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch.optim import lr_scheduler

#: ``optimizer_path`` → keyword arguments selecting PyTorch's optimizer implementation.
#: single_tensor is the per-parameter loop (CPU default), foreach the multi-tensor one,
#: fused the single-kernel one.
OPTIMIZER_PATHS = {
    "single_tensor": {"foreach": False, "fused": False},
    "foreach": {"foreach": True, "fused": False},
    "fused": {"foreach": False, "fused": True},
}


def make_optimizer(settings: Mapping[str, Any], params: list, path: str):
    """``torch.optim`` optimizer from resolved settings, every hyperparameter explicit, over
    ``params`` (tensors, or parameter groups: ``parity.train.loop.param_groups``).

    Raises ``ValueError`` for an unknown name or path.
    """
    opt = settings
    kw = dict(OPTIMIZER_PATHS[path])
    if opt["name"] == "sgd":
        return torch.optim.SGD(
            params,
            lr=opt["lr"],
            momentum=opt.get("momentum", 0.0),
            dampening=opt.get("dampening", 0.0),
            nesterov=opt.get("nesterov", False),
            weight_decay=opt.get("weight_decay", 0.0),
            **kw,
        )
    cls = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW}.get(opt["name"])
    if cls is None:
        raise ValueError(f"unknown optimizer {opt['name']!r}")
    return cls(
        params,
        lr=opt["lr"],
        betas=tuple(opt["betas"]),
        eps=opt["eps"],
        weight_decay=opt["weight_decay"],
        amsgrad=opt.get("amsgrad", False),
        **kw,
    )


#: The learning-rate schedulers of ``torch.optim.lr_scheduler`` a schedule may name, with
#: their keyword arguments as a resolved schedule (``parity.plan.loop``) holds them.
TORCH_SCHEDULERS = {
    "StepLR": ("step_size", "gamma"),
    "MultiStepLR": ("milestones", "gamma"),
    "ExponentialLR": ("gamma",),
    "CosineAnnealingLR": ("T_max", "eta_min"),
    "LinearLR": ("start_factor", "end_factor", "total_iters"),
    "OneCycleLR": (
        "max_lr",
        "total_steps",
        "pct_start",
        "anneal_strategy",
        "cycle_momentum",
        "base_momentum",
        "max_momentum",
        "div_factor",
        "final_div_factor",
        "three_phase",
    ),
}
#: transformers' schedules (``transformers.optimization``), each a ``LambdaLR``.
TRANSFORMERS_SCHEDULES = {
    "get_cosine_schedule_with_warmup": ("num_warmup_steps", "num_training_steps", "num_cycles"),
    "get_linear_schedule_with_warmup": ("num_warmup_steps", "num_training_steps"),
}


def make_scheduler(opt: torch.optim.Optimizer, kind: Mapping[str, Any]):
    """The scheduler of a resolved schedule ``kind`` (its ``name`` and every argument; no
    ``order``) over ``opt``, made as a user makes it (its constructor's initial step sets
    the index-0 learning rate). Raises ``ValueError`` for an unknown name."""
    name = kind["name"]
    if name in TORCH_SCHEDULERS:
        cls = getattr(lr_scheduler, name)
        return cls(opt, **{k: kind[k] for k in TORCH_SCHEDULERS[name]})
    if name == "SequentialLR":
        members = [make_scheduler(opt, k) for k in kind["schedulers"]]
        return lr_scheduler.SequentialLR(opt, members, milestones=list(kind["milestones"]))
    if name in TRANSFORMERS_SCHEDULES:
        import transformers

        fn = getattr(transformers, name)
        return fn(opt, **{k: kind[k] for k in TRANSFORMERS_SCHEDULES[name]})
    raise ValueError(f"unknown schedule {name!r}")


def param_groups(
    groups: Sequence[Mapping[str, Any]], params: Mapping[str, torch.Tensor]
) -> list[dict[str, Any]]:
    """``torch.optim`` parameter groups of a resolved loop's ``param_groups``: each group's
    tensors (state_dict order) with its ``lr`` and ``weight_decay``."""
    return [
        {
            "params": [params[n] for n in g["params"]],
            "lr": g["lr"],
            "weight_decay": g["weight_decay"],
        }
        for g in groups
    ]


def total_norm(grads: Sequence[torch.Tensor]) -> torch.Tensor:
    """The 2-norm of every gradient together, as ``clip_grad_norm_`` computes it
    (``torch.nn.utils.get_total_norm``: the norm of the per-tensor norms), in the grads'
    dtype."""
    return torch.nn.utils.get_total_norm(grads, 2.0)


def clip(
    clip_setting: Mapping[str, Any] | None, params: Sequence[torch.Tensor], recorded: bool = True
):
    """Clips the gradients of ``params`` in place as the run's ``clip`` says and returns the
    step's scalars: ``(grad_norm, clip_coef)``, the total gradient norm before clipping as a
    float64 widened from its dtype, and the coefficient ``clip_grad_norm_`` multiplied every
    gradient by (``min(max_norm / (norm + 1e-6), 1)``, as it computes it; None without norm
    clipping). A step that is not ``recorded`` gets no norm (None) unless clipping computes
    it: a full pass over every gradient the trace would not keep."""
    grads = [p.grad for p in params if p.grad is not None]
    if clip_setting and "norm" in clip_setting:
        max_norm = clip_setting["norm"]
        norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
        # clip_grad_norm_'s own coefficient (torch/nn/utils/clip_grad.py, _clip_grads_with_norm_).
        coef = torch.clamp(max_norm / (norm + 1e-6), max=1.0)
        return float(norm.to(torch.float64)), float(coef.to(torch.float64))
    norm = None
    if recorded:
        norm = float(total_norm(grads).to(torch.float64)) if grads else 0.0
    if clip_setting and "value" in clip_setting:
        torch.nn.utils.clip_grad_value_(params, clip_setting["value"])
    return norm, None


def step(
    t: int,
    loop: Mapping[str, Any],
    loss_of: Callable[[int], torch.Tensor],
    batches: int,
    opt: torch.optim.Optimizer,
    scheduler,
    before_zero_grad: Callable[[], Any],
    recorded: bool = True,
) -> tuple[list[torch.Tensor], dict[str, Any]]:
    """Step ``t`` (from 1) of a run with a training loop, as a PyTorch user writes it: per
    micro-batch (the j-th of k on batch ((t − 1)·k + j) mod ``batches``) its loss
    (``loss_of(batch)``), after the first one ``before_zero_grad()`` (the runner writes a
    pending recorded step) and ``opt.zero_grad()``, the loss divided by k (reduction
    ``mean``, k > 1) and ``backward()``; then :func:`clip`, the scheduler stepped before the
    optimizer where its ``order`` says so, ``opt.step()``, and the scheduler after it as
    PyTorch requires. Returns the micro-batches' losses and the step's scalars (each group's
    learning rate in the update, the gradient norm before clipping, the clip coefficient;
    the norm only where the step is ``recorded`` or clipping computes it)."""
    acc = loop["accumulate"]
    k, mean = acc["micro_batches"], acc["reduction"] == "mean"
    losses = []
    for j in range(k):
        loss = loss_of(((t - 1) * k + j) % batches)
        if j == 0:
            before_zero_grad()
            opt.zero_grad()
        (loss / k if k > 1 and mean else loss).backward()
        losses.append(loss)
    params = [p for g in opt.param_groups for p in g["params"]]
    grad_norm, clip_coef = clip(loop["clip"], params, recorded)
    # a schedule's order; a user's own scheduler (model.torch.optimizer) steps after
    order = None if scheduler is None else (loop["schedule"] or {}).get("order", "after")
    if order == "before":
        scheduler.step()
    lrs = [float(g["lr"]) for g in opt.param_groups]
    opt.step()
    if order == "after":
        scheduler.step()
    return losses, {"lr": lrs, "grad_norm": grad_norm, "clip_coef": clip_coef}
