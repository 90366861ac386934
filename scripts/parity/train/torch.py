"""The PyTorch side: one training run, written as a trace.

The loop is the study's: parameters are plain tensors with ``requires_grad`` loaded from
the fixture, the model is functional (``F.linear``, ``F.conv1d``), and each step is
``loss = f(model(x), y); opt.zero_grad(); loss.backward(); opt.step()``.

A run may carry the PyTorch-side fault of the detection-power suite
(``frameworks.pytorch.FAULTS``): ``relu_grad_at_zero``, a ReLU whose derivative at
exactly 0 is 1 (:class:`ReluGradOneAtZero`). Without it nothing here changes.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from parity.core import usercode
from parity.core.devices import TORCH_DEVICE
from parity.core.models import model_params
from parity.plan.frameworks import pytorch
from parity.plan.keys import RunKey
from parity.trace import fixtures
from parity.trace.provenance import trace_metadata
from parity.trace.schema import TraceLayout, extra_column
from parity.trace.writer import TraceWriter
from parity.train import loop as training_loop

TORCH_DTYPES = {"f32": torch.float32, "f64": torch.float64}


class ReluGradOneAtZero(torch.autograd.Function):
    """max(h, 0) whose derivative at h = 0 is taken as 1, candle 0.11.0's convention
    (probe ``relu_abs_at_zero``), where PyTorch's ``relu`` takes 0.

    Forward: ``torch.relu(h)``. Backward: the incoming gradient where h ≥ 0, +0 elsewhere;
    for h ≠ 0 that is exactly what ``torch.relu``'s backward (``threshold_backward``) gives,
    so the fault changes a run only where a pre-activation is exactly 0.
    """

    @staticmethod
    def forward(ctx, h: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(h)
        return torch.relu(h)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        (h,) = ctx.saved_tensors
        return torch.where(h >= 0, grad, torch.zeros_like(grad))


def forward(
    model: Mapping[str, Any],
    p: Mapping[str, torch.Tensor],
    x: torch.Tensor,
    fault: Mapping[str, Any] | None = None,
    taps: dict[str, torch.Tensor] | None = None,
):
    """Forward pass of a model family (see ``models.model_params``).

    ``x``: ``[batch, *input]``; returns ``[batch, outputs]``. ``fault``: the run's fault
    setting, or None (see :func:`activation`). ``taps``, when given, receives every forward
    intermediate under its localisation name (``localise.forward_names``: ``fc1.out``,
    ``relu1.out``, …; ``conv.out``, ``relu.out``, ``fc.out``; the transformer's
    ``tok_emb.out`` … ``head.out``, :func:`transformer`) with ``retain_grad()`` called,
    so its gradient is kept after ``backward``; the computation is the same either way.
    """

    def tap(name: str, h: torch.Tensor) -> torch.Tensor:
        if taps is not None:
            h.retain_grad()
            taps[name] = h
        return h

    act = model.get("activation")
    if model["family"] == "mlp":
        layers = len(model["sizes"]) - 1
        h = x
        for i in range(1, layers + 1):
            h = tap(f"fc{i}.out", F.linear(h, p[f"fc{i}.weight"], p[f"fc{i}.bias"]))
            if i < layers:
                h = tap(f"{act}{i}.out", activation(h, act, fault))
        return h
    if model["family"] == "transformer":
        return transformer(model, p, x, tap)
    if model["family"] == "cnn1d":
        h = tap("conv.out", F.conv1d(x, p["conv.weight"], p["conv.bias"]))
        h = tap(f"{act}.out", activation(h, act, fault)).flatten(1)
        return tap("fc.out", F.linear(h, p["fc.weight"], p["fc.bias"]))
    raise ValueError(f"unknown model family {model['family']!r}")


#: Layer-norm ε of the transformer family (``nn.LayerNorm``'s default).
LN_EPS = 1e-5


def _layer_norm(h: torch.Tensor, p: Mapping[str, torch.Tensor], name: str) -> torch.Tensor:
    return F.layer_norm(h, (h.shape[-1],), p[f"{name}.weight"], p[f"{name}.bias"], LN_EPS)


def transformer(
    model: Mapping[str, Any],
    p: Mapping[str, torch.Tensor],
    x: torch.Tensor,
    tap: Callable[[str, torch.Tensor], torch.Tensor] | None = None,
):
    """The transformer family (``parity_common::families::TransformerConfig``) in functional
    form: token ids ``x`` ``[B, T]`` int64 → logits ``[B, T, vocab]``.

    Attention (``model["attention"]``): ``explicit`` computes (q·kᵀ)·(1/√d_head) (the scale
    a Python float, applied in the tensor's dtype), fills the future keys with −∞
    (``masked_fill``) and takes ``torch.softmax`` over the keys, then p·v; ``sdpa`` calls
    ``F.scaled_dot_product_attention(q, k, v, is_causal=True)``, PyTorch's fused path. GELU
    is ``F.gelu`` (exact erf), layer norm ``F.layer_norm`` (ε 1e-5).

    ``tap(name, h)``, when given, is called on each named intermediate as it is computed and
    returns it (``localise.transformer_dataflow`` lists the names: ``tok_emb.out`` …
    ``head.out``); with ``sdpa`` the scores and weights (``attn.scores.out``,
    ``attn.softmax.out``) stay inside the fused op and are not tapped (:data:`SDPA_HIDDEN`).
    """
    tap = tap or (lambda _name, h: h)
    b_, t = x.shape
    d, heads = model["d_model"], model["heads"]
    dh = d // heads
    positions = torch.arange(t, device=x.device)
    h = tap("tok_emb.out", F.embedding(x, p["tok_emb.weight"])) + tap(
        "pos_emb.out", F.embedding(positions, p["pos_emb.weight"])
    )
    causal = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)

    def split(z: torch.Tensor) -> torch.Tensor:
        return z.view(b_, t, heads, dh).transpose(1, 2)

    def lin(path: str, z: torch.Tensor, bias: bool = True) -> torch.Tensor:
        b = p[f"{path}.bias"] if bias else None
        return tap(f"{path}.out", F.linear(z, p[f"{path}.weight"], b))

    for i in range(model["blocks"]):
        blk = f"blocks.{i}."
        a = tap(blk + "ln1.out", _layer_norm(h, p, blk + "ln1"))
        q = split(lin(blk + "attn.q", a))
        k = split(lin(blk + "attn.k", a, bias=False))  # no key bias
        v = split(lin(blk + "attn.v", a))
        if model.get("attention", "explicit") == "sdpa":
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            scores = tap(blk + "attn.scores.out", (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(dh)))
            weights = torch.softmax(scores.masked_fill(causal, float("-inf")), dim=-1)
            o = tap(blk + "attn.softmax.out", weights) @ v
        o = tap(blk + "attn.context.out", o.transpose(1, 2).reshape(b_, t, d))
        h = h + lin(blk + "attn.out", o)
        m = tap(blk + "ln2.out", _layer_norm(h, p, blk + "ln2"))
        m = tap(blk + "mlp.gelu.out", F.gelu(lin(blk + "mlp.fc1", m)))
        h = tap(f"blocks.{i}.out", h + lin(blk + "mlp.fc2", m))
    return tap("head.out", F.linear(tap("ln_f.out", _layer_norm(h, p, "ln_f")), p["head.weight"]))


#: The transformer's intermediates PyTorch's fused attention (``attention: sdpa``) computes
#: inside ``F.scaled_dot_product_attention``, where no tap reaches them (per block, with
#: the ``blocks.{i}.`` prefix).
SDPA_HIDDEN = ("attn.scores.out", "attn.softmax.out")


def untapped(model: Mapping[str, Any]) -> list[str]:
    """The replay quantities the PyTorch side cannot record for ``model``, each as
    ``name: reason`` (a replay header's ``missing`` items): with ``attention: sdpa`` the
    attention scores and weights of every block and their gradients; none otherwise."""
    if model["family"] != "transformer" or model.get("attention", "explicit") != "sdpa":
        return []
    why = "inside F.scaled_dot_product_attention (attention: sdpa), one fused op"
    names = [f"blocks.{i}.{n}" for i in range(model["blocks"]) for n in SDPA_HIDDEN]
    return [f"{n}: {why}" for n in names] + [f"grad:{n}: {why}" for n in names]


def activation(h: torch.Tensor, name: str, fault: Mapping[str, Any] | None = None) -> torch.Tensor:
    """Apply a named activation; with fault ``relu_grad_at_zero``, :class:`ReluGradOneAtZero`."""
    if name == "relu":
        if fault is not None and fault["kind"] == "relu_grad_at_zero":
            return ReluGradOneAtZero.apply(h)
        return torch.relu(h)
    raise ValueError(f"unknown activation {name!r}")


def loss_fn(name: str, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Batch-mean loss: ``mse`` (F.mse_loss) or ``cross_entropy`` (F.cross_entropy); a
    transformer's logits ``[B, T, V]`` against next tokens ``[B, T]`` are flattened to
    ``[B·T, V]`` and ``[B·T]`` first (the mean over batch × sequence)."""
    if out.dim() == 3:
        out, y = out.reshape(-1, out.shape[-1]), y.reshape(-1)
    if name == "mse":
        return F.mse_loss(out, y)
    if name == "cross_entropy":
        return F.cross_entropy(out, y)
    raise ValueError(f"unknown loss {name!r}")


def _host(t: torch.Tensor) -> np.ndarray:
    return t.detach().reshape(-1).cpu().numpy().copy()


class Net:
    """The model a run of a built-in family (mlp, cnn1d, transformer) trains: its parameters
    by state_dict key (``params``, plain tensors with ``requires_grad`` made from ``values``,
    the fixture's or a replay's state, in state_dict order) and its functional forward pass
    (:func:`forward`). An own model's is ``parity.own.torch_model.OwnNet``, with the same
    attributes; :func:`train` and :func:`replay` take either."""

    #: Only an own model's forward hooks give a dataflow (``parity.localise.walk``).
    hooks = None

    def __init__(self, model: Mapping[str, Any], values, names, device, dtype):
        self.model = model
        self.params = {
            n: torch.tensor(np.asarray(values[n]), device=device, dtype=dtype).requires_grad_()
            for n in names
        }

    def forward(self, x: torch.Tensor, fault=None, taps: dict | None = None) -> torch.Tensor:
        """The model's output for one batch ``x`` (:func:`forward`)."""
        return forward(self.model, self.params, x, fault, taps)


def train(
    key: RunKey,
    settings: Mapping[str, Any],
    fixture: str,
    out: str,
    threads: int,
    log: logging.Logger,
    net: type = Net,
    copy_beside: bool | None = None,
    writer: type = TraceWriter,
):
    """Run ``key`` with its resolved ``settings`` (``resolve.resolve_run``) from the fixture
    ``fixture`` and write its trace to ``out``; ``net`` makes the model (:class:`Net`, or an
    own model's ``parity.own.torch_model.OwnNet``).

    ``copy_beside`` (default: on the CPU with a built-in model): a recorded step's tensors
    are copied to host memory on a helper thread while the next forward pass runs, and the
    loop waits for the copy before ``zero_grad`` and the optimizer step, the first calls
    that change what it copies (the optimizer changes parameters and moments in place). It
    saves the loop the copy, 3-4% of a step of the scale experiment on an Intel Xeon
    (docs/performance.md, "an Intel Xeon, and the second copy"); the trace is the same
    byte for byte. An own model's forward pass may change a recorded tensor in place (a
    buffer), so it copies in the loop, as does a GPU run (its copy waits for the device).

    ``writer`` makes the trace writer (:class:`TraceWriter`; ``bench/recording_floor.py``
    swaps in writers that do part of its work, to measure what each part costs).

    Raises ``RuntimeError`` when the device is missing or this process's torch is not the
    release the run was planned with (``settings["torch_version"]``, the torch of the
    environment that built the plan: ``versions.torch_version``), ``ValueError`` for a fault
    this runner does not implement; the trace is then not written.
    """
    planned = settings.get("torch_version")
    if planned and torch.__version__.split("+", 1)[0] != planned:
        raise RuntimeError(
            f"this job's torch is {torch.__version__}, the run was planned with torch "
            f"{planned} (the environment Snakemake runs in): run both with one torch release"
        )
    torch.set_num_threads(threads)
    s = settings
    fault = s.get("fault")
    if fault is not None and fault["kind"] not in pytorch.FAULTS:
        raise ValueError(
            f"the PyTorch runner has no fault {fault['kind']!r} (it has {list(pytorch.FAULTS)})"
        )
    device = torch.device(TORCH_DEVICE[key.device])
    if key.device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device cuda requested but torch.cuda.is_available() is False")
    if key.device == "metal" and not torch.backends.mps.is_available():
        raise RuntimeError("device metal requested but torch.backends.mps.is_available() is False")
    dtype = TORCH_DTYPES[key.dtype]
    fx = fixtures.load(fixture)
    fixtures.check(fixture, fx, s)
    names = [n for n, _ in model_params(s["model"])]
    net_cls = net
    net = net_cls(s["model"], fx, names, device, dtype)
    p = net.params
    x = torch.from_numpy(fx["x"]).to(device=device)
    if x.is_floating_point():  # a transformer's x holds token ids (int64)
        x = x.to(dtype)
    y = torch.from_numpy(fx["y"]).to(device=device)
    if s["loss"] == "mse":
        y = y.to(dtype)
    loop = s.get("loop")
    own = s["model"].get("torch", {}).get("optimizer") if s["model"]["family"] == "own" else None
    if own:
        # the user's own optimizer and scheduler (docs/loop.md, "Your own loop")
        from parity.own.torch_model import own_optimizer

        opt, scheduler = own_optimizer(own, net.module)
    else:
        groups = training_loop.param_groups(loop["param_groups"], p) if loop else list(p.values())
        opt = training_loop.make_optimizer(s["optimizer"], groups, s["optimizer_path"])
        schedule = loop and loop["schedule"]
        scheduler = (
            training_loop.make_scheduler(opt, {k: v for k, v in schedule.items() if k != "order"})
            if schedule
            else None
        )

    rec = s["record"]
    recorded = rec.get("tensors") or names
    extras = []
    if rec.get("grads"):
        extras += [extra_column("grad", n) for n in recorded]
    if rec.get("moments"):
        extras += [extra_column(k, n) for n in recorded for k in ("exp_avg", "exp_avg_sq")]
    layout = TraceLayout.of(key.dtype, [(n, p[n].shape) for n in recorded], extras)
    meta = trace_metadata(
        key,
        settings,
        fixture,
        torch.__version__,
        {
            "threads": torch.get_num_threads(),
            "device_detail": str(device),
            "optimizer_impl": f"torch.optim.{type(opt).__name__}",
            "optimizer_path": s["optimizer_path"],
            "deterministic": torch.are_deterministic_algorithms_enabled(),
        },
    )
    steps, every = s["steps"], rec["every"]
    batches = x.shape[0]

    def recorded_row() -> dict[str, np.ndarray]:
        """The recorded tensors as they are now, copied to host memory."""
        row = {n: _host(p[n]) for n in recorded}
        for n in recorded if rec.get("grads") else ():
            row[extra_column("grad", n)] = _host(p[n].grad)
        for n in recorded if rec.get("moments") else ():
            state = opt.state[p[n]]
            row[extra_column("exp_avg", n)] = _host(state["exp_avg"])
            row[extra_column("exp_avg_sq", n)] = _host(state["exp_avg_sq"])
        return row

    if copy_beside is None:
        copy_beside = device.type == "cpu" and net_cls is Net
    # A recorded step's copy, made beside the next forward pass: (step, loss, Future,
    # loop scalars).
    pending: tuple[int, float, Future, dict | None] | None = None
    with (
        writer(out, layout, meta) as w,
        ThreadPoolExecutor(1, "record-copy") if copy_beside else contextlib.nullcontext() as pool,
    ):
        w.write_step(0, None, {n: _host(p[n]) for n in recorded})  # no extras at step 0
        started = time.perf_counter()
        for t in range(1, steps + 1):
            usercode.progress(f"step {t} of {steps}")  # an own model's job watches it
            if loop:
                # the pending copy is written before zero_grad, after the first forward pass
                done, pending = pending, None
                losses, scalars = training_loop.step(
                    t,
                    loop,
                    lambda b: loss_fn(s["loss"], net.forward(x[b], fault), y[b]),
                    x.shape[0],
                    opt,
                    scheduler,
                    lambda done=done: (
                        done and w.write_step(done[0], done[1], done[2].result(), scalars=done[3])
                    ),
                    recorded=not (t % every and t != steps),
                )
            else:
                i = (t - 1) % batches
                loss = loss_fn(s["loss"], net.forward(x[i], fault), y[i])
                if pending is not None:  # before zero_grad and step change what it copies
                    w.write_step(pending[0], pending[1], pending[2].result(), scalars=pending[3])
                    pending = None
                opt.zero_grad()
                loss.backward()
                opt.step()
                losses, scalars = [loss], None
            if t % every and t != steps:
                continue
            # A loss widened to f64; with micro-batches, the mean of theirs.
            widened = [float(v.detach().to(torch.float64).cpu()) for v in losses]
            value = widened[0] if len(widened) == 1 else sum(widened) / len(widened)
            if pool is not None:
                pending = (t, value, pool.submit(recorded_row), scalars)
            else:
                w.write_step(t, value, recorded_row(), scalars=scalars)
            if t % max(1, steps // 10) == 0 or t == steps:
                log.info("step %d/%d loss %.8f", t, steps, value)
        if pending is not None:
            w.write_step(pending[0], pending[1], pending[2].result(), scalars=pending[3])
        # Wall time of the steps and their recording (benchmarks read it).
        w.meta["runner"]["train_seconds"] = time.perf_counter() - started
    log.info("wrote %s (%s)", out, w.meta["status"])


def replay(
    settings: Mapping[str, Any],
    fixture: str,
    state: Mapping[str, np.ndarray],
    steps_taken: int,
    step: int,
    device: str,
    dtype: str,
    threads: int,
    net: type = Net,
) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """Same-state replay of step ``step`` (see ``parity.localise.replay``): parameters from
    ``state`` (state_dict keys, float32 or float64 values), Adam/AdamW moments from
    ``exp_avg:<key>``/``exp_avg_sq:<key>`` with ``steps_taken`` steps already taken, loaded
    through ``Optimizer.load_state_dict``; one step on batch ``(step − 1) mod batches`` as
    :func:`train` runs it, the run's fault included.

    Returns (tensors, header): flat arrays in the run dtype named as
    ``parity_common::replay::intermediate_names`` (forward quantities and ``loss``,
    ``grad:`` of each but the loss, ``grad:<key>`` and ``after:<key>`` per parameter), and
    the replay's provenance (framework version, optimizer implementation, note).
    """
    torch.set_num_threads(threads)
    s = settings
    fault = s.get("fault")
    tdev = torch.device(TORCH_DEVICE[device])
    tdt = TORCH_DTYPES[dtype]
    fx = fixtures.load(fixture)
    fixtures.check(fixture, fx, s)
    names = [n for n, _ in model_params(s["model"])]
    # Copies: the optimizer updates the parameters in place, and ``state`` is shared by
    # every replay of a localisation.
    net = net(s["model"], {**fx, **{n: np.array(state[n]) for n in names}}, names, tdev, tdt)
    p = net.params
    i = (step - 1) % fx["x"].shape[0]
    x = torch.from_numpy(fx["x"][i]).to(device=tdev)
    if x.is_floating_point():  # a transformer's x holds token ids (int64)
        x = x.to(tdt)
    y = torch.from_numpy(fx["y"][i]).to(device=tdev)
    if s["loss"] == "mse":
        y = y.to(tdt)
    opt = training_loop.make_optimizer(s["optimizer"], list(p.values()), s["optimizer_path"])
    if s["optimizer"]["name"] != "sgd" and steps_taken > 0:
        sd = opt.state_dict()
        sd["state"] = {
            j: {
                "step": torch.tensor(float(steps_taken)),
                "exp_avg": torch.tensor(np.array(state[f"exp_avg:{n}"]), dtype=tdt),
                "exp_avg_sq": torch.tensor(np.array(state[f"exp_avg_sq:{n}"]), dtype=tdt),
            }
            for j, n in enumerate(names)
        }
        opt.load_state_dict(sd)
    taps: dict[str, torch.Tensor] = {}
    usercode.progress(f"the replay of step {step}")
    loss = loss_fn(s["loss"], net.forward(x, fault, taps), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    out = {n: _host(t) for n, t in taps.items()}
    out["loss"] = _host(loss)
    out.update({f"grad:{n}": _host(t.grad) for n, t in taps.items() if t.grad is not None})
    for n in names:
        if p[n].grad is not None:
            out[f"grad:{n}"] = _host(p[n].grad)
        out[f"after:{n}"] = _host(p[n])
    header = {
        "framework_version": torch.__version__,
        "optimizer_impl": f"torch.optim.{type(opt).__name__} ({s['optimizer_path']})",
        "replay_note": "",
    }
    if net.hooks is not None:
        # An own model's intermediates and how they feed each other (parity.localise.walk).
        header["dataflow"] = json.dumps(net.dataflow(taps))
        missing = [f"grad:{n}: no gradient" for n, t in taps.items() if t.grad is None]
        missing += [f"grad:{n}: no gradient" for n in names if p[n].grad is None]
        header["missing"] = "; ".join(missing)
    elif untapped(s["model"]):
        header["missing"] = "; ".join(untapped(s["model"]))
    return out, header
