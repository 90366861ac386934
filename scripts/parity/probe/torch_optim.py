"""The PyTorch side of a probe's training loop: the optimizer (``make_optimizer``), the
micro-batch rows a micro-step reads (``micro_env``) and what happens to the accumulated
gradients between the last backward pass and the step (``transform_grads``).

Gradient accumulation itself is PyTorch's own: ``.grad`` is not cleared between the
backward passes of one optimizer step, so each ``loss.backward()`` adds to it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from parity.train import loop as training_loop

#: Quantity suffixes naming a slot of the optimizer's per-parameter state
#: (``optimizer.state[p][slot]``).
STATE_SLOTS = ("exp_avg", "exp_avg_sq", "momentum_buffer")

#: The optimizers of ``ProbeOptimizer``.
OPTIMIZERS = ("sgd", "adam", "adamw")


def make_optimizer(spec: Mapping, params: list[torch.Tensor]) -> torch.optim.Optimizer:
    """The PyTorch optimizer of a normalized ``optimizer`` (``ProbeOptimizer``) over
    ``params``, with the single-tensor implementation (``foreach=False``, ``fused=False``),
    built as the training runs build theirs (``parity.train.loop.make_optimizer``).

    SGD settings a v1 spec leaves out (it gives ``lr`` only) are PyTorch's defaults.
    Raises ``ValueError`` for an unknown optimizer name, and what PyTorch raises for
    settings it refuses.
    """
    # the training runs' constructor (one place for every torch.optim argument)
    return training_loop.make_optimizer(spec, params, "single_tensor")


def micro_env(case: Mapping, leaves: Mapping[str, torch.Tensor], m: int) -> dict[str, torch.Tensor]:
    """The tensors micro-step ``m`` (counted over the whole case from 0) starts from: the
    ``leaves`` and, for each ``{"name", "input"}`` of ``case["micro_batches"]``, ``name``
    bound to row ``m`` of that input (``input[m]``, a view)."""
    env = dict(leaves)
    for bound in case.get("micro_batches", []):
        env[bound["name"]] = leaves[bound["input"]][m]
    return env


def transform_grads(
    transforms: Sequence[Mapping], leaves: Mapping[str, torch.Tensor], params: list
) -> None:
    """Applies the normalized ``grad_transforms`` in order to the ``.grad`` of ``params``
    (the inputs with requires_grad, by name in ``leaves``), in place:

    * ``scale``: ``p.grad.mul_(factor)`` for every gradient;
    * ``clip_norm``: ``torch.nn.utils.clip_grad_norm_(params, max_norm, foreach=False)``
      (norm 2 over every gradient, coefficient ``min(max_norm / (N + 1e-6), 1)``);
    * ``clip_value``: ``torch.nn.utils.clip_grad_value_(params, v, foreach=False)``;
    * ``replace``: ``p.grad`` becomes the values, rounded once from float64 to ``p``'s
      dtype (a gradient PyTorch left at None included).

    Parameters without a gradient are left as they are by the other transforms (as the
    clipping functions do). Raises ``ValueError`` for an unknown kind.
    """
    for t in transforms:
        kind = t["kind"]
        if kind == "scale":
            for p in params:
                if p.grad is not None:
                    p.grad.mul_(t["factor"])
        elif kind == "clip_norm":
            torch.nn.utils.clip_grad_norm_(params, t["max_norm"], foreach=False)
        elif kind == "clip_value":
            torch.nn.utils.clip_grad_value_(params, t["clip_value"], foreach=False)
        elif kind == "replace":
            p = leaves[t["input"]]
            values = torch.tensor([float(v) for v in t["values"]], dtype=torch.float64)
            p.grad = values.reshape(p.shape).to(device=p.device, dtype=p.dtype)
        else:
            raise ValueError(f"unknown gradient transform {kind!r}")
