"""The PyTorch side of the probes: interprets a normalized probe (``format.Probe``).

PyTorch is the reference every other framework is compared against, so each op here is the
PyTorch function whose semantics the probe language names (``amax`` for ``max``, stable
``sort``, average pooling's ``count_include_pad``, ...; see
``rust/parity-common/src/probe_spec/op.rs``, whose ``Op`` is the normalized contract).

Per case: fresh leaves from the inputs' float64 values rounded once to the run's dtype
(``int64`` inputs as ``torch.int64``; those with ``requires_grad`` as autograd leaves), then
``optimizer_steps`` iterations (1 without an optimizer) of: ``accumulate`` micro-steps
(the steps in order, the loss terms added in order, ``loss.backward()``, which adds to
``.grad``), the gradient transforms (``torch_optim.transform_grads``) and the optimizer
step when there is one. One optimizer object serves every iteration (``foreach=False``,
``fused=False``: the single-tensor loop), and the gradients are cleared before each
iteration. Every compared quantity is recorded at each iteration (the loss and forward
values at each micro-step, stacked along a micro-step dimension when there are several);
with more than one iteration the records are stacked along a new leading dimension (row k:
iteration k + 1).

Layout changes are PyTorch views (``transpose``, ``narrow`` and ``expand`` give strided
tensors, ``contiguous`` copies). Errors PyTorch raises are outcomes (``framework-error``) of
every quantity not yet known when they are raised, never a crash of the job.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F

from parity.core.devices import TORCH_DEVICE
from parity.probe.format import AFTER_STEP, GRAD, LOSS, Probe, parse_quantity
from parity.probe.results import Outcome
from parity.probe.shapes.table import LAYOUT_OPS
from parity.probe.torch_optim import (
    OPTIMIZERS,
    STATE_SLOTS,
    make_optimizer,
    micro_env,
    transform_grads,
)
from parity.trace.provenance import probe_metadata

#: The run dtypes of a probe. Values of every dtype are reported widened exactly to float64.
TORCH_DTYPES = {
    "f16": torch.float16,
    "bf16": torch.bfloat16,
    "f32": torch.float32,
    "f64": torch.float64,
}

#: What PyTorch raises for a shape, dtype or argument it refuses. Anything else is a bug in
#: this module and fails the job.
FRAMEWORK_ERRORS = (RuntimeError, ValueError, TypeError, IndexError, NotImplementedError)

Args = Mapping[str, Any]
Inputs = Sequence[torch.Tensor]


def _same_shape(op: str, a: torch.Tensor, b: torch.Tensor) -> None:
    # PyTorch broadcasts silently; the probe language asks for equal shapes (probes broadcast
    # explicitly with broadcast_to), and the reference refuses anything else.
    if a.shape != b.shape:
        raise ValueError(f"{op}: shapes {list(a.shape)} and {list(b.shape)} differ")


def _elementwise(op: str, fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]):
    def apply(x: Inputs, a: Args) -> torch.Tensor:
        _same_shape(op, x[0], x[1])
        return fn(x[0], x[1])

    return apply


def _matmul(x: Sequence[torch.Tensor]) -> torch.Tensor:
    """``torch.matmul`` of ``[..., m, k]`` by ``[..., k, n]`` with equal batch dimensions, as
    the probe language defines it (shapes.dense.matmul): torch.matmul would broadcast the
    batch or accept rank 1, which a probe spells out with broadcast_to and unsqueeze.
    Raises ``ValueError`` otherwise."""
    a, b = x
    if a.dim() < 2 or b.dim() < 2:
        raise ValueError(f"matmul: ranks {a.dim()} and {b.dim()}; both must be 2 or more")
    if a.shape[:-2] != b.shape[:-2]:
        raise ValueError(
            f"matmul: batch dimensions {list(a.shape[:-2])} and {list(b.shape[:-2])} differ"
        )
    return torch.matmul(a, b)


#: The arguments every convolution takes (transposed ones add ``output_padding``).
CONV_ARGS = ("stride", "padding", "dilation", "groups")


def _conv(fn, *names: str):
    """``fn(input, kernel, bias, **arguments)`` with the probe arguments ``names``; the bias
    is the third input where the op takes one (the transposed convolutions), else None."""

    def apply(x: Inputs, a: Args) -> torch.Tensor:
        return fn(x[0], x[1], x[2] if len(x) > 2 else None, **{k: a[k] for k in names})

    return apply


def _pool_args(a: Args) -> dict[str, Any]:
    """A pooling's keyword arguments besides the kernel: ``stride``, ``padding`` and those
    of ``dilation``, ``ceil_mode``, ``count_include_pad`` the op has, pairs as tuples."""
    names = ("stride", "padding", "dilation", "ceil_mode", "count_include_pad")
    return {k: tuple(a[k]) if isinstance(a[k], list) else a[k] for k in names if k in a}


def _flat_padding(pairs: Sequence[Sequence[int]]) -> list[int]:
    """The probe's ``[before, after]`` pairs (last dimension last) as ``F.pad``'s flat list
    (last dimension first)."""
    return [n for before, after in reversed(pairs) for n in (before, after)]


def _dims(x: torch.Tensor, a: Args) -> tuple[int, ...]:
    """A reduction's dimensions: ``dims``, or every dimension when it is null."""
    return tuple(range(x.dim())) if a["dims"] is None else tuple(a["dims"])


def _reduction(fn):
    def apply(x: Inputs, a: Args) -> torch.Tensor:
        return fn(x[0], dim=_dims(x[0], a), keepdim=a["keepdim"])

    return apply


def _mse(x: Inputs, a: Args) -> torch.Tensor:
    # F.mse_loss only warns when the shapes differ, then broadcasts.
    _same_shape("mse", x[0], x[1])
    return F.mse_loss(x[0], x[1], reduction=a["reduction"])


#: op name → f(inputs, arguments), the arguments as ``probe_spec/op.rs`` ``Op`` names them.
OPS: dict[str, Callable[[Inputs, Args], torch.Tensor]] = {
    # layout changes
    "transpose": lambda x, a: x[0].transpose(a["dim0"], a["dim1"]),
    "narrow": lambda x, a: x[0].narrow(a["dim"], a["start"], a["length"]),
    "broadcast_to": lambda x, a: x[0].expand(*a["shape"]),
    "unsqueeze": lambda x, a: x[0].unsqueeze(a["dim"]),
    "squeeze": lambda x, a: x[0].squeeze(a["dim"]),
    "reshape": lambda x, a: x[0].reshape(a["shape"]),
    "contiguous": lambda x, a: x[0].contiguous(),
    # convolutions and pooling
    "conv1d": _conv(F.conv1d, *CONV_ARGS),
    "conv2d": _conv(F.conv2d, *CONV_ARGS),
    "conv_transpose1d": _conv(F.conv_transpose1d, *CONV_ARGS, "output_padding"),
    "conv_transpose2d": _conv(F.conv_transpose2d, *CONV_ARGS, "output_padding"),
    "max_pool1d": lambda x, a: F.max_pool1d(x[0], a["kernel"], **_pool_args(a)),
    "max_pool2d": lambda x, a: F.max_pool2d(x[0], tuple(a["kernel"]), **_pool_args(a)),
    "avg_pool1d": lambda x, a: F.avg_pool1d(x[0], a["kernel"], **_pool_args(a)),
    "avg_pool2d": lambda x, a: F.avg_pool2d(x[0], tuple(a["kernel"]), **_pool_args(a)),
    "pad": lambda x, a: F.pad(x[0], _flat_padding(a["padding"])),
    # linear algebra and normalisation
    "linear": lambda x, a: F.linear(x[0], x[1], x[2] if len(x) > 2 else None),
    "matmul": lambda x, a: _matmul(x),
    "layer_norm": lambda x, a: F.layer_norm(x[0], (x[0].shape[-1],), x[1], x[2], a["eps"]),
    "rms_norm": lambda x, a: F.rms_norm(x[0], (x[0].shape[-1],), x[1], a["eps"]),
    "softmax": lambda x, a: torch.softmax(x[0], a["dim"]),
    "log_softmax": lambda x, a: torch.log_softmax(x[0], a["dim"]),
    "upsample_nearest1d": lambda x, a: F.interpolate(x[0], size=a["size"], mode="nearest"),
    "upsample_nearest2d": lambda x, a: F.interpolate(x[0], size=tuple(a["size"]), mode="nearest"),
    # element-wise
    "relu": lambda x, a: torch.relu(x[0]),
    "abs": lambda x, a: torch.abs(x[0]),
    "sigmoid": lambda x, a: torch.sigmoid(x[0]),
    "tanh": lambda x, a: torch.tanh(x[0]),
    "silu": lambda x, a: F.silu(x[0]),
    "gelu": lambda x, a: F.gelu(x[0], approximate=a["approximate"]),
    "elu": lambda x, a: F.elu(x[0], alpha=a["alpha"]),
    "exp": lambda x, a: torch.exp(x[0]),
    "log": lambda x, a: torch.log(x[0]),
    "sqrt": lambda x, a: torch.sqrt(x[0]),
    "add": _elementwise("add", torch.add),
    "sub": _elementwise("sub", torch.sub),
    "mul": _elementwise("mul", torch.mul),
    "div": _elementwise("div", torch.div),
    "maximum": _elementwise("maximum", torch.maximum),
    "minimum": _elementwise("minimum", torch.minimum),
    # reductions
    "sum": _reduction(torch.sum),
    "mean": _reduction(torch.mean),
    "max": _reduction(torch.amax),
    "min": _reduction(torch.amin),
    "argmax": lambda x, a: torch.argmax(x[0], dim=a["dim"], keepdim=a["keepdim"]),
    "argmin": lambda x, a: torch.argmin(x[0], dim=a["dim"], keepdim=a["keepdim"]),
    "sort": lambda x, a: (
        torch.sort(x[0], dim=a["dim"], descending=a["descending"], stable=True).values
    ),
    "argsort": lambda x, a: torch.argsort(
        x[0], dim=a["dim"], descending=a["descending"], stable=True
    ),
    # indexing
    "embedding": lambda x, a: F.embedding(x[0], x[1]),
    "index_select": lambda x, a: torch.index_select(x[0], a["dim"], x[1]),
    "gather": lambda x, a: torch.gather(x[0], a["dim"], x[1]),
    "scatter_add": lambda x, a: torch.scatter_add(x[0], a["dim"], x[1], x[2]),
    "scatter": lambda x, a: torch.scatter(x[0], a["dim"], x[1], x[2]),
    "index_add": lambda x, a: torch.index_add(x[0], a["dim"], x[1], x[2]),
    "index_put": lambda x, a: torch.index_put(x[0], (x[1],), x[2], accumulate=a["accumulate"]),
    # losses
    "bce_with_logits": lambda x, a: F.binary_cross_entropy_with_logits(x[0], x[1]),
    "cross_entropy": lambda x, a: F.cross_entropy(x[0], x[1], reduction=a["reduction"]),
    "nll": lambda x, a: F.nll_loss(x[0], x[1], reduction=a["reduction"]),
    "mse": _mse,
}

#: The positions of each op's int64 inputs (indices, class targets); every other input of
#: every op is a float tensor (``Op::integer_inputs`` in probe_spec/op.rs).
INTEGER_INPUTS: dict[str, tuple[int, ...]] = {
    "embedding": (0,),
    "index_select": (1,),
    "gather": (1,),
    **dict.fromkeys(["scatter_add", "scatter", "index_add", "index_put"], (1,)),
    "cross_entropy": (1,),
    "nll": (1,),
}

#: Ops whose output is int64 (``Op::integer_output``).
INTEGER_OUTPUTS = frozenset({"argmax", "argmin", "argsort"})


def apply_op(op: Mapping[str, Any], inputs: Inputs) -> torch.Tensor:
    """``op`` (a normalized op: ``name`` and every argument) applied to ``inputs``.

    Raises ``TypeError`` when an input is not of the kind the op takes (int64 at the
    positions of :data:`INTEGER_INPUTS`, floating point elsewhere but for the layout changes,
    which take either: PyTorch would otherwise compute something the probe language does not
    mean, such as soft-label cross-entropy), and whatever PyTorch raises for shapes or
    arguments it refuses.
    """
    name = op["name"]
    ints = INTEGER_INPUTS.get(name, ())
    # A layout change takes a tensor of either kind and keeps it (probe_shapes.LAYOUT_OPS).
    for i, t in enumerate(() if name in LAYOUT_OPS else inputs):
        if i in ints and t.dtype != torch.int64:
            raise TypeError(f"{name}: input {i} must be int64, not {t.dtype}")
        if i not in ints and not t.is_floating_point():
            raise TypeError(f"{name}: input {i} must be a float tensor, not {t.dtype}")
    if inputs and inputs[0].device.type != "cpu":
        check_indices(name, inputs, op)
    return OPS[name](inputs, op)


def check_indices(name: str, inputs: Inputs, op: Mapping[str, Any]) -> None:
    """Raises ``IndexError`` for an index input of ``name`` out of range, as PyTorch's CPU
    kernels do.

    Run before a GPU kernel: an out-of-range index there is a device-side assertion, which
    leaves the CUDA context unusable and would end every later case of the batch. Targets
    of ``cross_entropy``/``nll`` may also be PyTorch's ``ignore_index`` (-100).
    """
    if name not in INTEGER_INPUTS:
        return
    if name == "embedding":
        index, size, what = inputs[0], inputs[1].shape[0], "embedding rows"
    elif name in ("cross_entropy", "nll"):
        if inputs[0].dim() < 2:
            return
        index, size, what = inputs[1], inputs[0].shape[1], "classes"
        index = index[index != -100]
    else:
        x, index = inputs[:2]
        if x.dim() == 0:
            return
        if name == "index_put":
            op = {**op, "dim": 0}
        dim = op["dim"] % x.dim() if -x.dim() <= op["dim"] < x.dim() else None
        if dim is None:
            return
        size, what = x.shape[dim], f"dimension {op['dim']}"
    bad = index[(index < 0) | (index >= size)]
    if bad.numel():
        raise IndexError(f"{name}: index {int(bad[0])} is out of range for {size} {what}")


def _loss_term(term: Mapping, env: Mapping[str, torch.Tensor]) -> torch.Tensor:
    t = env[term["input"]]
    if term["kind"] == "sum":
        return t.sum()
    if term["kind"] == "sum_squares":
        return (t * t).sum()
    w = env[term["weights"]]
    _same_shape("weighted_sum", t, w)
    return (t * w).sum()


def _message(e: BaseException) -> str:
    first = str(e).strip().splitlines()
    return f"{type(e).__name__}: {first[0] if first else ''}"


def _leaf(spec: Mapping, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    # float() also reads the strings "inf", "-inf" and "nan" of the runner JSON.
    values = [float(v) for v in spec["values"]]
    t = torch.tensor(values, dtype=torch.float64).reshape(spec["shape"])
    if spec.get("dtype", "float") == "int64":
        return t.to(device=device, dtype=torch.int64)
    # One rounding, float64 → run dtype (round to nearest even).
    return t.to(device=device, dtype=dtype).requires_grad_(bool(spec["requires_grad"]))


def run_case(
    probe: Probe, case: Mapping, dtype: torch.dtype, device: torch.device
) -> list[Outcome]:
    """The outcomes of one normalized case, in its ``compare`` order.

    Values are reported widened exactly to float64 (int64 quantities too). A quantity is
    ``ok`` once it is recorded at every iteration; an error PyTorch raises makes every
    quantity not yet complete a ``framework-error`` (a forward value or the loss of a
    single iteration is complete before the backward pass). A gradient PyTorch leaves at
    ``None`` is ``missing-gradient``. Raises ``ValueError`` for a malformed spec
    (``optimizer_steps`` above 1 without an optimizer, or below 1; an unknown optimizer).
    """
    name = case["name"]
    compare = list(case["compare"])
    iterations = int(case.get("optimizer_steps", 1))
    if iterations < 1 or (case["optimizer"] is None and iterations != 1):
        raise ValueError(
            f"case {name}: optimizer_steps {iterations}: at least 1, and 1 without an optimizer"
        )
    if case["optimizer"] is not None and case["optimizer"]["name"] not in OPTIMIZERS:
        raise ValueError(f"case {name}: unknown optimizer {case['optimizer']['name']!r}")
    parsed = {q: parse_quantity(q) for q in compare}
    rows: dict[str, list[torch.Tensor]] = {q: [] for q in compare}
    found: dict[str, Outcome] = {}

    def record(q: str, t: torch.Tensor) -> None:
        rows[q].append(t.detach().clone())

    try:
        leaves = {s["name"]: _leaf(s, dtype, device) for s in probe.spec["inputs"]}
        params = [t for t in leaves.values() if t.requires_grad]
        optimizer = None
        if case["optimizer"] is not None:
            optimizer = make_optimizer(case["optimizer"], params)
        micro = int(case.get("accumulate", 1))
        for it in range(iterations):
            for p in params:
                p.grad = None
            forward: dict[str, list[torch.Tensor]] = {q: [] for q in compare}
            for j in range(micro):
                env = micro_env(case, leaves, it * micro + j)
                for step in case["steps"]:
                    env[step["out"]] = apply_op(step["op"], [env[n] for n in step["inputs"]])
                loss = None
                if case["loss"] is not None:
                    terms = [_loss_term(t, env) for t in case["loss"]]
                    loss = terms[0]
                    for t in terms[1:]:
                        loss = loss + t
                for q, (base, suffix) in parsed.items():
                    if q == LOSS or suffix is None:
                        forward[q].append((loss if q == LOSS else env[base]).detach().clone())
                        if len(forward[q]) == micro:
                            record(q, forward[q][0] if micro == 1 else torch.stack(forward[q]))
                if loss is not None:
                    loss.backward()  # adds to .grad: accumulation over the micro-steps
            if loss is None:
                continue
            transform_grads(case.get("grad_transforms", []), leaves, params)
            for q, (base, suffix) in parsed.items():
                if suffix == GRAD:
                    g = leaves[base].grad
                    if g is None:
                        found.setdefault(q, Outcome.missing_gradient(name, q))
                    else:
                        record(q, g)
            if optimizer is None:
                continue
            optimizer.step()
            for q, (base, suffix) in parsed.items():
                if suffix == AFTER_STEP:
                    record(q, leaves[base])
                elif suffix in STATE_SLOTS:
                    state = optimizer.state.get(leaves[base], {})
                    if state.get(suffix) is None:
                        found.setdefault(
                            q,
                            Outcome.error(name, q, f"the optimizer holds no {suffix} for {base}"),
                        )
                    else:
                        record(q, state[suffix])
    except FRAMEWORK_ERRORS as e:
        for q in compare:
            if q not in found and len(rows[q]) < iterations:
                found[q] = Outcome.error(name, q, _message(e))
    out = []
    for q in compare:
        if q in found:
            out.append(found[q])
            continue
        t = rows[q][0] if iterations == 1 else torch.stack(rows[q])
        out.append(Outcome.ok(name, q, t.reshape(-1).to("cpu", torch.float64).numpy(), t.shape))
    return out


def run(probe: Probe, dtype: str, device: str, threads: int, log: logging.Logger) -> list[Outcome]:
    """Every outcome of ``probe`` in ``dtype`` (``f16``, ``bf16``, ``f32``, ``f64``) on
    ``device``, in ``Probe.quantities`` order.

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
    """What the result file records about this PyTorch run (``parity.probe.results``)."""
    return probe_metadata(
        torch.__version__,
        {
            "threads": torch.get_num_threads(),
            "device_detail": str(torch.device(TORCH_DEVICE[device])),
            "deterministic": torch.are_deterministic_algorithms_enabled(),
        },
    )
