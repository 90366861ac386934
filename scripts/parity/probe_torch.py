"""The PyTorch side of the probes: interprets a normalized probe (``probes.Probe``).

Per case: fresh leaves from the inputs' float64 values rounded to the run's dtype (those
with ``requires_grad`` as autograd leaves), the steps in order, the loss terms added in
order, ``loss.backward()``, then an optional single optimizer step. Layout changes are
PyTorch views (``transpose``, ``narrow`` and ``expand`` give strided tensors, ``contiguous``
copies). Errors PyTorch raises are outcomes (``framework-error``), never a crash of the job.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F

from .devices import TORCH_DEVICE
from .probe_results import Outcome
from .probes import AFTER_STEP, GRAD, LOSS, Probe, parse_quantity
from .provenance import probe_metadata

TORCH_DTYPES = {"f32": torch.float32, "f64": torch.float64}

#: What PyTorch raises for a shape, dtype or argument it refuses. Anything else is a bug in
#: this module and fails the job.
FRAMEWORK_ERRORS = (RuntimeError, ValueError, TypeError, IndexError, NotImplementedError)


def _same_shape(op: str, a: torch.Tensor, b: torch.Tensor) -> None:
    # PyTorch broadcasts silently; candle does not. Probes broadcast with broadcast_to.
    if a.shape != b.shape:
        raise ValueError(f"{op}: shapes {list(a.shape)} and {list(b.shape)} differ")


def _add(x: Sequence[torch.Tensor], a: Mapping) -> torch.Tensor:
    _same_shape("add", *x)
    return x[0] + x[1]


def _mul(x: Sequence[torch.Tensor], a: Mapping) -> torch.Tensor:
    _same_shape("mul", *x)
    return x[0] * x[1]


def _conv(fn):
    def op(x: Sequence[torch.Tensor], a: Mapping) -> torch.Tensor:
        return fn(
            x[0],
            x[1],
            None,
            stride=a["stride"],
            padding=a["padding"],
            dilation=a["dilation"],
            groups=a["groups"],
        )

    return op


#: op name → f(inputs, arguments) (see ``schemas/probe.schema.yaml``).
OPS: dict[str, Callable[[Sequence[torch.Tensor], Mapping[str, Any]], torch.Tensor]] = {
    "transpose": lambda x, a: x[0].transpose(a["dim0"], a["dim1"]),
    "narrow": lambda x, a: x[0].narrow(a["dim"], a["start"], a["length"]),
    "broadcast_to": lambda x, a: x[0].expand(*a["shape"]),
    "unsqueeze": lambda x, a: x[0].unsqueeze(a["dim"]),
    "squeeze": lambda x, a: x[0].squeeze(a["dim"]),
    "reshape": lambda x, a: x[0].reshape(a["shape"]),
    "contiguous": lambda x, a: x[0].contiguous(),
    "conv1d": _conv(F.conv1d),
    "conv2d": _conv(F.conv2d),
    "linear": lambda x, a: F.linear(x[0], x[1], x[2] if len(x) > 2 else None),
    "matmul": lambda x, a: torch.matmul(x[0], x[1]),
    "layer_norm": lambda x, a: F.layer_norm(x[0], (x[0].shape[-1],), x[1], x[2], a["eps"]),
    "softmax": lambda x, a: torch.softmax(x[0], a["dim"]),
    "upsample_nearest1d": lambda x, a: F.interpolate(x[0], size=a["size"], mode="nearest"),
    "upsample_nearest2d": lambda x, a: F.interpolate(x[0], size=tuple(a["size"]), mode="nearest"),
    "relu": lambda x, a: torch.relu(x[0]),
    "abs": lambda x, a: torch.abs(x[0]),
    "add": _add,
    "mul": _mul,
    "bce_with_logits": lambda x, a: F.binary_cross_entropy_with_logits(x[0], x[1]),
}


def _loss_term(term: Mapping, env: Mapping[str, torch.Tensor]) -> torch.Tensor:
    t = env[term["input"]]
    if term["kind"] == "sum":
        return t.sum()
    if term["kind"] == "sum_squares":
        return (t * t).sum()
    w = env[term["weights"]]
    _same_shape("weighted_sum", t, w)
    return (t * w).sum()


def _optimizer(spec: Mapping, params: list[torch.Tensor]) -> torch.optim.Optimizer:
    if spec["name"] == "sgd":
        return torch.optim.SGD(params, lr=spec["lr"], foreach=False)
    return torch.optim.AdamW(
        params,
        lr=spec["lr"],
        betas=tuple(spec["betas"]),
        eps=spec["eps"],
        weight_decay=spec["weight_decay"],
        foreach=False,
        fused=False,
    )


def _message(e: BaseException) -> str:
    first = str(e).strip().splitlines()
    return f"{type(e).__name__}: {first[0] if first else ''}"


def _ok(case: str, q: str, t: torch.Tensor) -> Outcome:
    t = t.detach()
    return Outcome.ok(case, q, t.reshape(-1).to("cpu", torch.float64).numpy(), t.shape)


def run_case(
    probe: Probe, case: Mapping, dtype: torch.dtype, device: torch.device
) -> list[Outcome]:
    """The outcomes of one normalized case, in its ``compare`` order."""
    name = case["name"]
    leaves = {}
    for spec in probe.spec["inputs"]:
        t = torch.tensor(spec["values"], dtype=torch.float64).reshape(spec["shape"])
        leaves[spec["name"]] = t.to(device=device, dtype=dtype).requires_grad_(
            spec["requires_grad"]
        )
    env: dict[str, torch.Tensor] = dict(leaves)
    found: dict[str, Outcome] = {}

    def fail_all(e: BaseException, which: Callable[[str | None], bool]) -> None:
        for q in case["compare"]:
            if q not in found and which(parse_quantity(q)[1]):
                found[q] = Outcome.error(name, q, _message(e))

    loss = None
    try:
        for step in case["steps"]:
            op = step["op"]
            env[step["out"]] = OPS[op["name"]]([env[n] for n in step["inputs"]], op)
        if case["loss"] is not None:
            terms = [_loss_term(t, env) for t in case["loss"]]
            loss = terms[0]
            for t in terms[1:]:
                loss = loss + t
    except FRAMEWORK_ERRORS as e:
        fail_all(e, lambda suffix: True)
        return [found[q] for q in case["compare"]]
    for q in case["compare"]:
        base, suffix = parse_quantity(q)
        if q == LOSS:
            found[q] = _ok(name, q, loss)
        elif suffix is None:
            found[q] = _ok(name, q, env[base].clone())
    if loss is not None:
        try:
            loss.backward()
            for q in case["compare"]:
                base, suffix = parse_quantity(q)
                if suffix == GRAD:
                    g = leaves[base].grad
                    found[q] = Outcome.missing_gradient(name, q) if g is None else _ok(name, q, g)
            if case["optimizer"] is not None:
                params = [t for t in leaves.values() if t.requires_grad]
                _optimizer(case["optimizer"], params).step()
                for q in case["compare"]:
                    base, suffix = parse_quantity(q)
                    if suffix == AFTER_STEP:
                        found[q] = _ok(name, q, leaves[base])
        except FRAMEWORK_ERRORS as e:
            fail_all(e, lambda suffix: suffix in (GRAD, AFTER_STEP))
    return [found[q] for q in case["compare"]]


def run(probe: Probe, dtype: str, device: str, threads: int, log: logging.Logger) -> list[Outcome]:
    """Every outcome of ``probe`` in ``dtype`` on ``device``, in ``Probe.quantities`` order.

    Raises ``RuntimeError`` when the device is missing (the job fails; nothing is written).
    """
    torch.set_num_threads(threads)
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device cuda requested but torch.cuda.is_available() is False")
    if device == "metal" and not torch.backends.mps.is_available():
        raise RuntimeError("device metal requested but torch.backends.mps.is_available() is False")
    dev = torch.device(TORCH_DEVICE[device])
    out = []
    for case in probe.cases:
        outcomes = run_case(probe, case, TORCH_DTYPES[dtype], dev)
        for o in outcomes:
            log.info("%s %s: %s", o.case, o.quantity, o.status)
        out += outcomes
    return out


def runner_metadata(device: str) -> dict:
    """What the result file records about this PyTorch run (``probe_results``)."""
    return probe_metadata(
        torch.__version__,
        {
            "threads": torch.get_num_threads(),
            "device_detail": str(torch.device(TORCH_DEVICE[device])),
            "deterministic": torch.are_deterministic_algorithms_enabled(),
        },
    )
