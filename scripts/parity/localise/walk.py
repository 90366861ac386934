"""Localisation: from a failing comparison to the first operation that differs.

A same-state replay (:mod:`parity.localise.replay`) runs one step k in both frameworks from the
reference run's state after step k − 1, in float32 and in float64, and records every
intermediate under one naming scheme taken from the PyTorch model's module paths:

* forward, in order: ``fc1.out`` (a Linear layer's output, before its activation),
  ``relu1.out`` (the activation's output), …, the logits, then ``loss``; for the 1-D CNN
  ``conv.out``, ``relu.out``, ``fc.out``, ``loss``; for the transformer every module's output
  and the attention's named ops, ``<module path>.out`` (:func:`transformer_dataflow`), the
  logits ``head.out``, ``loss``;
* backward, in the order autograd computes it: ``grad:<forward quantity>`` (d loss / d that
  tensor) from the logits back, each layer's ``grad:<param>`` after its output's gradient;
* update: ``update:<param>`` = parameter after the step − parameter before, in state_dict
  order (computed in float64 from the recorded ``after:<param>``, exact for float32).

The walk goes through that dataflow order and judges each quantity by two rules, both
against rounding rather than against a fixed tolerance:

* **float32**, the fp64-referenced rule of PyTorch's compiler accuracy checks
  (``same()`` in torch/_dynamo/utils.py, as in :func:`parity.compare.diagnosis.fp64_rule`), per
  tensor: RMSE(ref64 − cand32) ≤ m · max(RMSE(ref64 − ref32), floor) + atol. The floor,
  ``f32_floor_ulps`` float32 units of roundoff (2⁻²⁴) times RMS(ref64), keeps a tensor that
  the reference happens to round exactly (a one-element loss, a bias gradient) from
  demanding more of the candidate than float32 can hold;
* **float64**, the float64 split (as :func:`parity.compare.diagnosis.f64_rounding_threshold`):
  max|ref64 − cand64| ≤ factor · max(2⁻²⁹ · drift32, 2⁻⁵² · max|ref64|), where drift32 is
  the larger of max|ref32 − ref64| and max|cand32 − cand64|. Beyond it the two float64
  replays compute different formulas, however small the float32 difference.

A quantity *differs* when either rule fails (its :func:`judge`, a ``judgement.Judgement``
like every other verdict: ``fail``, with the rule that failed). It is the **culprit** when
it is the first that differs while every quantity it is computed from agrees; a later
quantity that differs because an input differs is *downstream*. Quantities a framework
cannot record are *not recorded* and are looked through: their inputs stand in for them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from parity.compare.closeness import MaxDiff, fp64_rule_multiplier, max_abs_diff
from parity.compare.diagnosis import ROUNDOFF_RATIO, rmse, ulp_at
from parity.compare.judgement import Judgement
from parity.compare.verdicts import FAIL, PASS
from parity.core.models import model_params
from parity.render.tables import LOCALISE_COLUMNS

#: Dataflow phases, in walk order.
PHASES = ("forward", "backward", "update")

#: Verdicts of one quantity.
AGREES, DIFFERS, DOWNSTREAM, NOT_RECORDED = "agrees", "differs", "downstream", "not recorded"

#: Roles of the four replays: reference and candidate, float32 and float64.
ROLES = ("ref32", "cand32", "ref64", "cand64")
#: How a note names the float32 run of a role.
ROLE_NAMES = {"ref32": "the reference", "cand32": "the candidate"}

#: Columns of the localisation table (defined with the other tables, so the job of a
#: skipped localisation writes its header without importing this module).
COLUMNS = LOCALISE_COLUMNS

#: float32 and float64 unit roundoff.
U32, U64 = 2.0**-24, 2.0**-53


@dataclass(frozen=True)
class Quantity:
    """One intermediate of a training step: its walk position, phase, name and the
    quantities it is computed from (state and data, identical on both sides, are left out)."""

    order: int
    phase: str
    name: str
    inputs: tuple[str, ...]


def _activation(model: Mapping) -> str | None:
    return model.get("activation")


def forward_names(model: Mapping) -> list[str]:
    """The forward quantities of ``model``, ``loss`` last; the same list as
    ``parity_common::replay::forward_names`` (Rust)."""
    act = _activation(model)
    if model["family"] == "mlp":
        layers = len(model["sizes"]) - 1
        out = []
        for i in range(1, layers + 1):
            out.append(f"fc{i}.out")
            if i < layers:
                out.append(f"{act}{i}.out")
        return [*out, "loss"]
    if model["family"] == "cnn1d":
        return ["conv.out", f"{act}.out", "fc.out", "loss"]
    if model["family"] == "transformer":
        return [d["name"] for d in transformer_dataflow(model)] + ["loss"]
    raise ValueError(f"unknown model family {model['family']!r}")


def _layers(model: Mapping) -> list[tuple[str, str | None, str | None]]:
    """Per parametrised layer, in forward order: (layer prefix, its activation's output or
    None, the forward quantity feeding it or None for the data)."""
    act = _activation(model)
    if model["family"] == "mlp":
        layers = len(model["sizes"]) - 1
        return [
            (
                f"fc{i}",
                f"{act}{i}.out" if i < layers else None,
                f"{act}{i - 1}.out" if i > 1 else None,
            )
            for i in range(1, layers + 1)
        ]
    return [("conv", f"{act}.out", None), ("fc", None, f"{act}.out")]


def own_quantities(params: Sequence[str], dataflow: Sequence[Mapping]) -> list[Quantity]:
    """An own model's quantities from its PyTorch replay's ``dataflow`` (the intermediates
    its forward hooks recorded, in the order their modules finished, each with what it is
    computed from: ``parity.train.torch.Net.dataflow``).

    Forward: each module's output ``<module path>.out``, the model's ``output``, ``loss``.
    Backward, in reverse: ``grad:`` of each output, computed from the gradients of the
    quantities that read it (and ``loss`` for the model's output), then the gradients of
    the parameters of that module (``<module path>.<name>``), computed from its output's
    gradient and its inputs; a parameter of no recorded module comes last, from the output's
    gradient. Update: ``update:<param>`` from its gradient."""
    forward = [d["name"] for d in dataflow]
    inputs = {d["name"]: tuple(i for i in d["inputs"] if i in forward) for d in dataflow}
    out: list[tuple[str, str, tuple[str, ...]]] = [("forward", n, inputs[n]) for n in forward]
    out.append(("forward", "loss", ("output",) if "output" in forward else tuple(forward[-1:])))
    consumers: dict[str, list[str]] = {n: [] for n in forward}
    for n in forward:
        for i in inputs[n]:
            consumers[i].append(n)
    owner = {}
    for p in params:
        module = p.rpartition(".")[0]
        if f"{module}.out" in inputs:
            owner[p] = f"{module}.out"
    for n in reversed(forward):
        deps = [f"grad:{c}" for c in consumers[n]]
        if n == "output" or not consumers[n]:
            deps.append("loss")
        out.append(("backward", f"grad:{n}", (*deps, n)))
        for p in params:
            if owner.get(p) == n:
                out.append(("backward", f"grad:{p}", (f"grad:{n}", *inputs[n])))
    last = "grad:output" if "output" in forward else "loss"
    for p in params:
        if p not in owner:
            out.append(("backward", f"grad:{p}", (last,)))
    out += [("update", f"update:{p}", (f"grad:{p}",)) for p in params]
    return [Quantity(i + 1, ph, n, ins) for i, (ph, n, ins) in enumerate(out)]


def quantities(model: Mapping, dataflow: Sequence[Mapping] | None = None) -> list[Quantity]:
    """Every quantity of one training step of ``model`` in dataflow order (forward, backward
    in reverse, update), each with the quantities it is computed from; an own model's from
    its replay's ``dataflow`` (:func:`own_quantities`)."""
    params = [n for n, _ in model_params(model)]
    if model["family"] == "own":
        return own_quantities(params, dataflow or [])
    if model["family"] == "transformer":
        # Its dataflow has the form of an own model's: each parameter's gradient follows
        # its module output's gradient, computed from it and that module's inputs.
        return own_quantities(params, transformer_dataflow(model))
    layers = _layers(model)
    out: list[tuple[str, str, tuple[str, ...]]] = []
    previous: str | None = None
    for prefix, act_out, _ in layers:
        out.append(("forward", f"{prefix}.out", (previous,) if previous else ()))
        previous = f"{prefix}.out"
        if act_out:
            out.append(("forward", act_out, (previous,)))
            previous = act_out
    out.append(("forward", "loss", (previous,)))
    # Backward: the loss's backward gives the logits' gradient; each layer then gives its
    # parameters' gradients and its input's.
    upstream = "loss"
    for k in range(len(layers) - 1, -1, -1):
        prefix, act_out, feeding = layers[k]
        if act_out:  # the activation's backward, from the layer after it
            out.append(("backward", f"grad:{act_out}", (upstream,)))
            upstream = f"grad:{act_out}"
        deps = (upstream, f"{prefix}.out") if upstream != "loss" else (f"{prefix}.out", "loss")
        out.append(("backward", f"grad:{prefix}.out", deps))
        g = f"grad:{prefix}.out"
        for p in params:
            if p.startswith(prefix + "."):
                extra = (feeding,) if p.endswith(".weight") and feeding else ()
                out.append(("backward", f"grad:{p}", (g, *extra)))
        upstream = g
    for p in params:
        out.append(("update", f"update:{p}", (f"grad:{p}",)))
    return [Quantity(i + 1, ph, n, ins) for i, (ph, n, ins) in enumerate(out)]


def transformer_dataflow(model: Mapping, batch: int = 1) -> list[dict]:
    """The transformer's named intermediates in forward order, each ``{"name", "inputs",
    "shape"}`` (the form of an own model's ``dataflow``), for a batch of ``batch`` sequences;
    the same names as ``parity_common::replay::transformer_forward_names`` (Rust).

    Each is ``<module path>.out``, the module paths being the parameters' prefixes, as a
    PyTorch forward hook on that module would name its output; the attention's inner ops are
    named as modules of ``attn``. ``tok_emb.out`` ``[B, T, d]``, ``pos_emb.out`` ``[T, d]``;
    per block ``blocks.{i}.``: ``ln1.out``, ``attn.q.out``, ``attn.k.out``, ``attn.v.out``
    (``[B, T, d]``, before the split into heads), ``attn.scores.out`` ((q·kᵀ)·(1/√dh) before
    the causal mask, ``[B, H, T, T]``), ``attn.softmax.out`` (the weights, mask and softmax
    applied), ``attn.context.out`` (weights·v, heads merged, ``[B, T, d]``), ``attn.out.out``,
    ``ln2.out``, ``mlp.fc1.out`` ``[B, T, 4d]``, ``mlp.gelu.out``, ``mlp.fc2.out``, and
    ``blocks.{i}.out``, the residual stream after the block; then ``ln_f.out`` and
    ``head.out`` (the logits ``[B, T, V]``). The residual stream is named only at block
    ends: a layer norm or block output takes the stream's parts as its inputs (block 0's
    input is ``tok_emb.out`` + ``pos_emb.out``)."""
    b, t, d, heads = batch, model["seq_len"], model["d_model"], model["heads"]
    out: list[dict] = []

    def add(path: str, inputs, shape) -> str:
        out.append({"name": f"{path}.out", "inputs": list(inputs), "shape": list(shape)})
        return f"{path}.out"

    stream = (add("tok_emb", (), (b, t, d)), add("pos_emb", (), (t, d)))
    for i in range(model["blocks"]):
        blk = f"blocks.{i}."
        a = add(blk + "ln1", stream, (b, t, d))
        q, k, v = (add(f"{blk}attn.{m}", (a,), (b, t, d)) for m in "qkv")
        scores = add(blk + "attn.scores", (q, k), (b, heads, t, t))
        weights = add(blk + "attn.softmax", (scores,), (b, heads, t, t))
        context = add(blk + "attn.context", (weights, v), (b, t, d))
        attn = add(blk + "attn.out", (context,), (b, t, d))
        m = add(blk + "ln2", (*stream, attn), (b, t, d))
        m = add(blk + "mlp.fc1", (m,), (b, t, 4 * d))
        m = add(blk + "mlp.gelu", (m,), (b, t, 4 * d))
        m = add(blk + "mlp.fc2", (m,), (b, t, d))
        stream = (add(f"blocks.{i}", (*stream, attn, m), (b, t, d)),)
    add("head", (add("ln_f", stream, (b, t, d)),), (b, t, model["vocab"]))
    return out


def shapes(
    model: Mapping, batch: int, dataflow: Sequence[Mapping] | None = None
) -> dict[str, tuple[int, ...]]:
    """PyTorch shape of every quantity for a batch of ``batch`` samples (``loss`` is
    ``()``); an own model's intermediates take the shapes its replay recorded."""
    p = dict(model_params(model))
    out: dict[str, tuple[int, ...]] = {"loss": ()}
    if model["family"] == "own":
        out.update({d["name"]: tuple(d["shape"]) for d in dataflow or []})
    elif model["family"] == "transformer":
        out.update({d["name"]: tuple(d["shape"]) for d in transformer_dataflow(model, batch)})
    elif model["family"] == "mlp":
        sizes = model["sizes"]
        for n in forward_names(model)[:-1]:
            i = int(n.split(".")[0].lstrip("abcdefghijklmnopqrstuvwxyz"))
            out[n] = (batch, sizes[i])
    else:
        lout = model["length"] - model["kernel"] + 1
        out["conv.out"] = (batch, model["channels"], lout)
        out[f"{_activation(model)}.out"] = out["conv.out"]
        out["fc.out"] = (batch, model["classes"])
    for n in list(out):
        if n != "loss":
            out[f"grad:{n}"] = out[n]
    for n, s in p.items():
        out[f"grad:{n}"] = tuple(s)
        out[f"update:{n}"] = tuple(s)
    return out


def derive_updates(
    record: Mapping[str, np.ndarray], state: Mapping[str, np.ndarray], params
) -> dict:
    """``record`` with ``update:<p>`` = ``after:<p>`` − state ``p`` added, in float64 (exact
    for float32 values: the difference of two float32 numbers is exact in float64)."""
    out = dict(record)
    for p in params:
        a = record.get(f"after:{p}")
        if a is not None:
            out[f"update:{p}"] = np.asarray(a, np.float64) - np.asarray(state[p], np.float64)
    return out


@dataclass(frozen=True)
class Settings:
    """How a quantity is judged (config ``diagnosis`` and ``localise``)."""

    multiplier: float | str = "auto"
    atol: float = 1e-9
    f64_rounding_factor: float = 1000.0
    f32_floor_ulps: float = 4.0


@dataclass(frozen=True)
class QuantityJudgement(Judgement):
    """The judgement of one quantity against rounding: verdict ``pass`` where it agrees,
    ``fail`` where it differs (``message``: which rule failed); ``worst`` =
    max|ref32 − cand32| at ``where`` (``name[index]``, ``index`` the flat index), held to no
    tolerance (the rules are relative to rounding); the rules' measures: the ULP distance
    there, the fp64-referenced rule's ratio, max|ref64 − cand64| and its threshold."""

    index: int = 0
    ulp: float | None = None
    fp64_ratio: float | None = None
    f64_f64: float | None = None
    f64_threshold: float | None = None

    @property
    def differs(self) -> bool:
        """Whether the quantity differs (its verdict is ``fail``)."""
        return self.verdict == FAIL


def _rms(x: np.ndarray) -> float:
    return math.sqrt(float(np.mean(np.square(x)))) if x.size else 0.0


def _quantity(d: MaxDiff, ok: bool, why: str, **measures) -> QuantityJudgement:
    """The judgement of a quantity whose max|ref32 − cand32| is ``d``: agrees when ``ok``,
    else differs because ``why``; ``measures`` the rules' (:class:`QuantityJudgement`)."""
    return QuantityJudgement(
        PASS if ok else FAIL, d.value, d.where, None, "" if ok else why, d.index, **measures
    )


def _judge_f32_only(r32, c32, d, ulp, s: Settings) -> QuantityJudgement:
    """Without float64 replays (a run that has no float64): the float32 rule with the
    reference's float32 value standing in for the truth and the rounding floor for its
    error, RMSE(ref32 − cand32) ≤ m · floor + atol. Weaker than the two rules: it cannot
    tell a formula difference below float32 rounding from rounding."""
    if not (np.isfinite(r32).all() and np.isfinite(c32).all()):
        bad = not math.isfinite(d.value) or d.value > 0
        return _quantity(d, not bad, "not finite", ulp=ulp)
    m = fp64_rule_multiplier(r32.size, s.multiplier)
    err = rmse({"v": r32}, {"v": c32}, ["v"])
    floor = s.f32_floor_ulps * U32 * _rms(np.asarray(r32, np.float64))
    ratio = err / floor if floor > 0 else (0.0 if err == 0 else math.inf)
    ok = err <= m * floor + s.atol
    return _quantity(d, ok, "float32 rounding", ulp=ulp, fp64_ratio=ratio)


def judge(arrays: Mapping[str, np.ndarray], s: Settings, name: str = "v") -> QuantityJudgement:
    """Judge quantity ``name`` from its values in each role of :data:`ROLES` (flat or
    shaped arrays of one float dtype per role), against rounding by the two rules of the
    module docstring. Without ``ref64`` and ``cand64`` (a run that has no float64) only
    :func:`_judge_f32_only` applies."""
    r32, c32 = arrays["ref32"].reshape(-1), arrays["cand32"].reshape(-1)
    d = max_abs_diff({name: r32}, {name: c32}, [name])
    ulp = None
    if r32.dtype == c32.dtype and r32.dtype in (np.float32, np.float64) and r32.size:
        ulp = ulp_at({name: r32}, {name: c32}, d)
    if "ref64" not in arrays or "cand64" not in arrays:
        return _judge_f32_only(r32, c32, d, ulp, s)
    r64, c64 = arrays["ref64"].reshape(-1), arrays["cand64"].reshape(-1)
    why = []
    # float32: fp64-referenced rule with a rounding floor.
    if not (np.isfinite(c32).all() and np.isfinite(r64).all()):
        ratio, ok32 = math.inf, False
    else:
        m = fp64_rule_multiplier(r32.size, s.multiplier)
        ref_err = rmse({"v": r64}, {"v": r32}, ["v"])
        cand_err = rmse({"v": r64}, {"v": c32}, ["v"])
        floor = max(ref_err, s.f32_floor_ulps * U32 * _rms(np.asarray(r64, np.float64)))
        ratio = cand_err / floor if floor > 0 else (0.0 if cand_err == 0 else math.inf)
        ok32 = cand_err <= m * floor + s.atol
    if not ok32:
        why.append("float32: fp64-referenced rule")
    # float64: the split.
    f64 = max_abs_diff({"v": r64}, {"v": c64}, ["v"]).value
    drift = max(
        max_abs_diff({"v": r32}, {"v": r64}, ["v"]).value,
        max_abs_diff({"v": c32}, {"v": c64}, ["v"]).value,
    )
    scale = float(np.max(np.abs(r64))) if r64.size and np.isfinite(r64).all() else 0.0
    threshold = s.f64_rounding_factor * max(ROUNDOFF_RATIO * drift, 2 * U64 * scale)
    if not math.isfinite(threshold):
        threshold = 0.0
    ok64 = f64 <= threshold
    if not ok64:
        why.append("float64: beyond float64 rounding")
    measures = {"ulp": ulp, "fp64_ratio": ratio, "f64_f64": f64, "f64_threshold": threshold}
    return _quantity(d, ok32 and ok64, "; ".join(why), **measures)


def _update_ulp(j: QuantityJudgement, name: str, records) -> QuantityJudgement:
    """An update's ULP distance is counted on the parameters after the step (the update
    itself is a float64 difference, whose ULPs mean nothing for a float32 run)."""
    after = f"after:{name.removeprefix('update:')}"
    a, b = records["ref32"].get(after), records["cand32"].get(after)
    if a is None or b is None or not np.asarray(a).size:
        return j
    a, b = np.asarray(a).reshape(-1), np.asarray(b).reshape(-1)
    if a.dtype != b.dtype:
        return j
    ulp = ulp_at({"v": a}, {"v": b}, MaxDiff(j.worst, "v", j.index))
    return replace(j, ulp=ulp)


@dataclass
class Walk:
    """The walk's rows and its culprit (None when every quantity agrees)."""

    rows: list[dict]
    culprit: str | None
    culprit_phase: str | None


def walk(
    model: Mapping,
    batch: int,
    records: Mapping[str, Mapping[str, np.ndarray]],
    missing: Mapping[str, str],
    s: Settings,
    dataflow: Sequence[Mapping] | None = None,
) -> Walk:
    """Judge every quantity of ``model`` in dataflow order and find the culprit.

    ``records``: role (:data:`ROLES`; the float64 roles may be absent) → quantity name →
    flat values, ``update:<p>`` included (:func:`derive_updates`). ``missing``: quantity →
    why a framework did not record it. ``dataflow``: an own model's intermediates (the
    reference's replay header, :func:`own_quantities`). Returns one row per quantity
    (:data:`COLUMNS`); a parameter's gradient only one float32 run has differs.
    """
    qs = quantities(model, dataflow)
    shp = shapes(model, batch, dataflow)
    verdict: dict[str, str] = {}
    by_name = {q.name: q for q in qs}

    def effective(names: Sequence[str]) -> list[str]:
        out = []
        for n in names:
            if verdict.get(n) == NOT_RECORDED:
                out += effective(by_name[n].inputs)
            else:
                out.append(n)
        return out

    rows, culprit = [], None
    for q in qs:
        row = {c: None for c in COLUMNS}
        row.update(order=q.order, phase=q.phase, quantity=q.name, note="")
        row["shape"] = "x".join(str(n) for n in shp[q.name]) or "1"
        absent = [r for r in ("ref32", "cand32") if q.name not in records.get(r, {})]
        if len(absent) == 1 and f"update:{q.name[5:]}" in by_name and q.name.startswith("grad:"):
            # A parameter's gradient that one side computed and the other never received
            # (an op without a backward pass cuts the graph silently): a difference.
            why = missing.get(q.name, f"absent from {absent[0]}")
            inputs_differ = any(
                verdict.get(i) in (DIFFERS, DOWNSTREAM) for i in effective(q.inputs)
            )
            v = DOWNSTREAM if inputs_differ else DIFFERS
            row["note"] = f"no gradient in {ROLE_NAMES[absent[0]]} ({why})"
            if v == DIFFERS:
                lead = "culprit" if culprit is None else "differs while its inputs agree"
                culprit = culprit or q
                row["note"] = f"{lead}: {row['note']}"
            verdict[q.name] = row["verdict"] = v
            rows.append(row)
            continue
        if absent or q.name in missing:
            verdict[q.name] = NOT_RECORDED
            row["verdict"] = NOT_RECORDED
            row["note"] = missing.get(q.name, f"absent from {', '.join(absent)}")
            rows.append(row)
            continue
        arrays = {r: np.asarray(records[r][q.name]) for r in ROLES if q.name in records.get(r, {})}
        j = judge(arrays, s, q.name)
        if q.phase == "update":
            j = _update_ulp(j, q.name, records)
        row.update(
            max_abs_diff=j.worst,
            where=j.index,
            ulp=j.ulp,
            fp64_ratio=j.fp64_ratio,
            f64_f64=j.f64_f64,
            f64_threshold=j.f64_threshold,
        )
        if not j.differs:
            v = AGREES
        elif any(verdict.get(i) in (DIFFERS, DOWNSTREAM) for i in effective(q.inputs)):
            v = DOWNSTREAM
        else:
            v = DIFFERS
            if culprit is None:
                culprit = q
                row["note"] = f"culprit ({j.message})"
            else:
                row["note"] = f"differs while its inputs agree ({j.message})"
        verdict[q.name] = v
        row["verdict"] = v
        rows.append(row)
    return Walk(rows, culprit and culprit.name, culprit and culprit.phase)
