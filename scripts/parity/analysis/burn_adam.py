"""burn's Adam written out in float64, to find which part of it makes burn drift.

burn-optim 0.22.1's Adam (``adam.rs``, ``AdaptiveMomentum::transform``) differs from
``torch.optim.Adam`` in two places, both invisible in a float32 run and both in a float64 one:

* its β₁, β₂ and ε are ``f32`` config fields, so 0.9 is float32's 0.899999976…; the moment
  updates use those values and ``1 − β`` computed in float32;
* its bias correction is computed in float32 whatever the tensors' type:
  ``c = (1 − β₂ᵗ)^½ / (1 − β₁ᵗ)`` and ``ε·(1 − β₂ᵗ)^½``, with ``β.powi(t)`` (compiler-rt's
  ``__powisf2``: square-and-multiply, every product rounded to float32), then
  ``θ ← θ − lr · m·c / (√v + ε(1 − β₂ᵗ)^½)``.

:func:`train` replays one experiment's Adam run in float64 (torch, one thread) from its
fixture with one of three update rules — ``torch`` (PyTorch's single-tensor Adam),
``f32_betas`` (float32 β and ε, float64 factors) and ``burn`` (both) — so the split of burn's
float64 drift between the two causes is measured, not assumed. Cross-entropy models only
(the Adam experiments ``a1_adam`` and ``cnn_adam``).

Run as a script to print the decomposition for a results folder::

    python scripts/parity/analysis/burn_adam.py results a1_adam
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.numpy import load_file

if __package__ in (None, ""):  # run as a script: make ``parity`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from parity.trace.reader import TraceReader  # after the path, when run as a script

VARIANTS = ("torch", "f32_betas", "burn")


def powi_f32(a: float, n: int) -> np.float32:
    """``(a as f32).powi(n)`` as Rust computes it (compiler-rt ``__powisf2``)."""
    a, r = np.float32(a), np.float32(1)
    while True:
        if n & 1:
            r = np.float32(r * a)
        n //= 2
        if n == 0:
            return r
        a = np.float32(a * a)


def _forward(p: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """The workflow's models (``experiments.model_params`` names), PyTorch layout."""
    if "conv.weight" in p:
        h = F.relu(F.conv1d(x, p["conv.weight"], p["conv.bias"])).flatten(1)
        return F.linear(h, p["fc.weight"], p["fc.bias"])
    layers = sum(k.endswith(".weight") for k in p)
    h = x
    for i in range(1, layers + 1):
        h = F.linear(h, p[f"fc{i}.weight"], p[f"fc{i}.bias"])
        if i < layers:
            h = F.relu(h)
    return h


def train(
    fixture: str, steps: int, variant: str, lr: float, betas=(0.9, 0.999), eps=1e-8
) -> dict[str, np.ndarray]:
    """Parameters (state_dict key → flat float64 values) after ``steps`` Adam steps on the
    fixture's batches in turn, with cross-entropy, under ``variant`` (see the module docs).
    """
    if variant not in VARIANTS:
        raise ValueError(f"variant {variant!r} is not one of {VARIANTS}")
    torch.set_num_threads(1)
    fx = load_file(fixture)
    names = [k for k in fx if k not in ("x", "y")]
    b1, b2 = betas
    if variant != "torch":
        b1, b2, eps = (float(np.float32(v)) for v in (b1, b2, eps))
    p = {n: torch.tensor(fx[n].astype(np.float64), requires_grad=True) for n in names}
    m = {n: torch.zeros_like(p[n]) for n in names}
    v = {n: torch.zeros_like(p[n]) for n in names}
    x, y = torch.tensor(fx["x"].astype(np.float64)), torch.tensor(fx["y"])
    for t in range(1, steps + 1):
        i = (t - 1) % x.shape[0]
        grads = torch.autograd.grad(F.cross_entropy(_forward(p, x[i]), y[i]), list(p.values()))
        with torch.no_grad():
            for n, g in zip(names, grads, strict=True):
                if variant == "torch":
                    m[n].mul_(b1).add_(g, alpha=1 - b1)
                    v[n].mul_(b2).addcmul_(g, g, value=1 - b2)
                else:  # burn: m·β₁ + g·(1 − β₁), 1 − β in float32
                    m[n] = m[n] * b1 + g * float(np.float32(1) - np.float32(b1))
                    v[n] = v[n] * b2 + g.square() * float(np.float32(1) - np.float32(b2))
                if variant == "burn":
                    bc2_sqrt = np.sqrt(np.float32(1) - powi_f32(b2, t))
                    c = float(np.float32(bc2_sqrt / (np.float32(1) - powi_f32(b1, t))))
                    e = float(np.float32(np.float32(eps) * bc2_sqrt))
                    p[n] -= (m[n] * c / (v[n].sqrt() + e)) * lr
                else:  # torch.optim.Adam, single-tensor path, factors in float64
                    denom = (v[n].sqrt() / (1 - b2**t) ** 0.5).add_(eps)
                    p[n].addcdiv_(m[n], denom, value=-lr / (1 - b1**t))
    return {n: p[n].detach().numpy().ravel() for n in names}


def trace_params(path: str | Path, step: int = -1) -> dict[str, np.ndarray]:
    """A trace's parameters at one recorded step (position in its recorded steps; default
    the last), flat, widened to float64. Raises ``schema.TraceError`` for a bad trace."""
    reader = TraceReader(path)
    rec = reader.read_step(reader.steps[step])
    return {n: rec.tensors[n].astype(np.float64) for n in reader.layout.names}


def max_diff(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> float:
    """max |a − b| over every parameter."""
    return max(float(np.max(np.abs(a[n] - b[n]))) for n in a)


def decomposition(results: str | Path, experiment: str, steps: int, lr: float) -> dict:
    """For each variant, its distance after ``steps`` from the torch and burn float64
    traces in ``results``; plus the traces' own distance."""
    root = Path(results)
    torch64 = trace_params(root / f"traces/{experiment}/torch-f64-cpu.parquet")
    burn64 = trace_params(root / f"traces/{experiment}/burn-f64-cpu.parquet")
    fixture = str(root / f"fixtures/{experiment}.safetensors")
    out = {"torch_vs_burn": max_diff(torch64, burn64)}
    for variant in VARIANTS:
        r = train(fixture, steps, variant, lr)
        out[variant] = {"vs_torch": max_diff(r, torch64), "vs_burn": max_diff(r, burn64)}
    return out


if __name__ == "__main__":
    import yaml

    results, experiment = sys.argv[1], sys.argv[2]
    config = yaml.safe_load(Path(sys.argv[3] if len(sys.argv) > 3 else "config.yaml").read_text())
    exp = config["experiments"][experiment]
    d = decomposition(results, experiment, exp["steps"], exp["optimizer"]["lr"])
    print(f"{experiment}, {exp['steps']} steps: torch f64 vs burn f64 {d['torch_vs_burn']:.3g}")
    for variant in VARIANTS:
        print(
            f"  float64 replay '{variant}': {d[variant]['vs_torch']:.3g} from torch f64, "
            f"{d[variant]['vs_burn']:.3g} from burn f64"
        )
