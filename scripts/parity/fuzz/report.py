"""What a campaign's findings say: the table's rows and Markdown, one probe file per finding
and a framework-native reproduction per finding (written by ``parity.fuzz.job``).

**Known or new.** A finding is *known* when a case of a probe file in ``probes/`` has a
``known_bug`` entry for the finding's framework whose op, kind and layout equal the
finding's: the case's one non-layout step is the same op, a quantity its ``known_bug``
lists has the finding's kind (``check.kind_of``), and per input position the layout steps
between the leaf and the op (a ``contiguous`` step clears them) have the same kinds as
the finding's minimal route. Where only op, framework and kind agree the table names the
probe as *related* (probably the same fault reached through another layout). A
``known_bug`` whose ``versions`` list leaves out the release fuzzed (the framework's
primary release, ``settings["releases"]``) neither covers nor relates to a finding: that
release is recorded as not having the bug.

**Probe files** are the minimal case as a probe document (``generate.to_doc``) with a
``known_bug`` entry per framework failing on it, holding its values (or its outcome:
``framework-error``, ``missing-gradient``, ``non-finite``) under device ``cpu``, so the
normal probes target reports them as ``known-bug`` (reproduced) — ready to move into
``probes/``. A quantity whose values differ between two runs (memory read outside the
tensor) gets no entry: the probes target reports it as ``fail``. Comments give PyTorch's
values.

An error or missing gradient of a backward pass that the op's ``x-support`` entry already
documents for the framework (candle 0.11.0 has no conv_transpose1d backward) is known as
``x-support``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np

from parity.fuzz.campaign import Campaign, Finding
from parity.fuzz.check import ERROR, MISSING_GRAD, kind_of
from parity.fuzz.generate import Case, input_name, to_doc
from parity.probe import loader
from parity.probe import ops as probe_ops
from parity.probe import shapes as probe_shapes

COLUMNS = (
    "op",
    "framework",
    "dtype",
    "kind",
    "layout",
    "quantities",
    "shapes",
    "args",
    "failing_cases",
    "sources",
    "known_bug",
    "related",
    "probe",
    "repro",
    "note",
)
ROUTE_OPS = frozenset({"transpose", "narrow", "broadcast_to"})


# ----- known bugs -------------------------------------------------------------------------


def known_bug_cases(
    source: str | Path | Sequence[str | Path], releases: Mapping[str, str] | None = None
) -> list[dict]:
    """Every case of the probes of ``source`` (a folder, or a list of probe files) with a
    ``known_bug``, as ``{"probe",
    "case", "op", "framework", "kinds", "layout"}`` (one entry per framework): ``layout``
    the per-input tuple of layout step kinds before the case's one op, ``kinds`` those of
    its known-bug quantities. Cases with several non-layout ops are left out, and so is a
    framework's entry whose ``versions`` list does not name that framework's release in
    ``releases`` (framework → the release fuzzed; None or a framework missing from it:
    every entry counts)."""
    releases = releases or {}
    out = []
    if isinstance(source, (str, Path)):
        found = loader.discover(source)
    else:
        found = {(p := loader.load(path)).name: p for path in source}
    for name, p in found.items():
        for c in p.cases:
            if not c["known_bug"]:
                continue
            ops = [s for s in c["steps"] if s["op"]["name"] not in probe_shapes.LAYOUT_OPS]
            if len(ops) != 1:
                continue
            (step,) = ops
            origin = {i["name"]: () for i in p.spec["inputs"]}
            for s in c["steps"]:
                if s is step:
                    break
                src = origin.get(s["inputs"][0], ())
                kind = s["op"]["name"]
                origin[s["out"]] = () if kind == "contiguous" else (*src, kind)
            layout = tuple(origin.get(n, ()) for n in step["inputs"])
            leaves = {n: i for n, i in zip(step["inputs"], range(99), strict=False)}
            for fw, devices in c["known_bug"].items():
                named = c["known_bug_versions"].get(fw)
                if named is not None and fw in releases and releases[fw] not in named:
                    continue
                kinds = set()
                for quantities in devices.values():
                    for q, v in quantities.items():
                        if q == "loss":
                            continue
                        verdict = v if isinstance(v, str) else "fail"
                        kinds.add(_known_kind(step, q, verdict, c["steps"], leaves))
                out.append(
                    {
                        "probe": name,
                        "case": c["name"],
                        "op": step["op"]["name"],
                        "framework": fw,
                        "kinds": kinds,
                        "layout": layout,
                    }
                )
    return out


def _known_kind(step, quantity: str, verdict: str, steps, leaves) -> str:
    """The kind of a known-bug quantity: a leaf's gradient is named after the op input the
    leaf reaches (``x0``-style names are not used in hand-written probes)."""
    base, _, suffix = quantity.partition(".")
    if not suffix:
        return kind_of(step["op"]["name"], "y", verdict)
    reach = {base}
    for s in steps:
        if s["inputs"][0] in reach and s["op"]["name"] in probe_shapes.LAYOUT_OPS:
            reach.add(s["out"])
    pos = next((i for i, n in enumerate(step["inputs"]) if n in reach), 0)
    return kind_of(step["op"]["name"], f"{input_name(pos)}.grad", verdict)


def classify(f: Finding, known: Sequence[Mapping]) -> tuple[list[str], list[str]]:
    """(known bugs covering ``f``, related known bugs) as ``probe:case`` names; an error
    or missing gradient in a backward pass that the op's ``x-support`` documents for the
    framework ("no backward") is known as ``x-support``."""
    same, related = [], []
    support = probe_ops.op_support(f.op).get(f.framework, "").lower()
    note = " ".join(x.message.lower() for x in f.failures)
    if f.kind in (ERROR, MISSING_GRAD) and "no backward" in support and "backward" in note:
        same.append("x-support")
    for k in known:
        if (k["op"], k["framework"]) != (f.op, f.framework) or f.kind not in k["kinds"]:
            continue
        name = f"{k['probe']}:{k['case']}"
        layout = tuple(tuple(x for x in r if x in ROUTE_OPS) for r in k["layout"])
        (same if layout == f.layout else related).append(name)
    return same, related


# ----- probe files ------------------------------------------------------------------------


def probe_name(f: Finding, index: int) -> str:
    """``fuzz_{op}_{framework}_{kind}_{index}`` (kind with underscores)."""
    return f"fuzz_{f.op}_{f.framework}_{f.kind.replace(' ', '_')}_{index:02d}"


def values_text(values: Iterable[float] | None) -> str:
    """Values as a comment shows them: ``[1, 0.5, -2]`` (``%g``), ``—`` for none."""
    if values is None:
        return "—"
    return "[" + ", ".join(f"{v:g}" for v in values) + "]"


def probe_doc(f: Finding, name: str, seed: int) -> tuple[dict, str]:
    """(probe document, comment header) of a finding."""
    doc = to_doc(
        f.case,
        f"Layout fuzzer finding ({f.framework} {f.dtype}, {f.kind}): "
        + to_doc(f.case)["description"],
    )
    bugs: dict = {}
    for x in f.all_failures or f.failures:
        if (x.framework, x.quantity) in f.unstable:
            continue
        if x.kind in (ERROR, MISSING_GRAD):
            value = x.verdict
        elif x.verdict == "non-finite" or x.values is None:
            value = "non-finite"
        else:
            value = [_num(v) for v in x.values]
        bugs.setdefault(x.framework, {}).setdefault("cpu", {})[x.quantity] = value
    if bugs:
        doc["cases"]["case"]["known_bug"] = dict(sorted(bugs.items()))
    lines = [
        f"# {name}: found by the layout fuzzer (seed {seed}), shrunk from {', '.join(f.sources)}.",
        f"# {f.framework} {f.dtype} {f.kind}:",
    ]
    for fw, q in sorted(f.unstable):
        lines.append(
            f"# {fw} {q}: values differ between runs (memory outside the tensor "
            "read?): no known_bug values recorded, the verdict is fail"
        )
    for x in f.failures:
        lines.append(f"#   {x.quantity}: {x.message[:300]}")
        lines.append(f"#   PyTorch {x.dtype}: {x.quantity} = {values_text(x.reference)}")
    return doc, "\n".join(lines) + "\n"


def _num(v: float):
    if not math.isfinite(v):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")
    return int(v) if float(v).is_integer() else float(v)


# ----- reproductions ----------------------------------------------------------------------


def _rust_vec(values) -> str:
    return "vec![" + ", ".join(f"{float(v):?}f32".replace("?", "") for v in values) + "]"


def _f32(v: float) -> str:
    return f"{float(v)!r}f32"


def candle_source(f: Finding, name: str) -> str:
    """A standalone candle 0.11 program reproducing the finding (candle's own API)."""
    c = f.case
    lines = [
        "// " + name,
        "use candle_core::{Device, Tensor, Var};",
        "",
        "fn main() -> candle_core::Result<()> {",
        "    let dev = Device::Cpu;",
    ]
    names = []
    for i, inp in enumerate(c.inputs):
        n = input_name(i)
        vals = ", ".join(_f32(v) for v in inp.stored)
        lines.append(
            f"    let {n} = Var::from_vec(vec![{vals}], {tuple(inp.stored_shape)!r}, &dev)?;"
        )
        at = f"{n}.as_tensor().clone()"
        for j, (op, a) in enumerate(inp.route.steps):
            out = f"{n}_{j + 1}"
            call = {
                "transpose": f"transpose({a.get('dim0')}, {a.get('dim1')})",
                "narrow": f"narrow({a.get('dim')}, {a.get('start')}, {a.get('length')})",
                "broadcast_to": f"broadcast_as({tuple(a.get('shape', ()))!r})",
            }[op]
            lines.append(f"    let {out} = {at}.{call}?;")
            at = out
        names.append(at if at.startswith(n + "_") else f"{n}.as_tensor()")
    lines.append(f"    let y = {_candle_op(c, names)}?;")
    w = ", ".join(_f32(v) for v in c.weights)
    lines += [
        f"    let w = Tensor::from_vec(vec![{w}], {tuple(c.out_shape)!r}, &dev)?;",
        "    let loss = (&y * &w)?.sum_all()?;",
        "    let grads = loss.backward()?;",
        '    println!("y = {}", y.flatten_all()?);',
    ]
    for i in range(len(c.inputs)):
        n = input_name(i)
        lines.append(
            f'    match grads.get({n}.as_tensor()) {{ Some(g) => println!("{n}.grad = {{}}", '
            f'g.flatten_all()?), None => println!("{n}.grad: none") }}'
        )
    lines += ["    Ok(())", "}"]
    return "\n".join(lines) + "\n"


def _tuple(v) -> str:
    return repr(tuple(v)) if len(v) != 1 else f"({v[0]},)"


def _candle_op(c: Case, x: list[str]) -> str:
    a = {**probe_ops.op_defaults(c.op), **c.args}
    a0 = x[0]
    r = lambda i: f"&{x[i]}" if not x[i].endswith(")") else x[i]  # noqa: E731
    if c.op == "conv1d":
        return f"{a0}.conv1d({r(1)}, {a['padding']}, {a['stride']}, {a['dilation']}, {a['groups']})"
    if c.op == "conv2d":
        return f"{a0}.conv2d({r(1)}, {a['padding']}, {a['stride']}, {a['dilation']}, {a['groups']})"
    if c.op == "conv_transpose1d":
        return (
            f"{a0}.conv_transpose1d({r(1)}, {a['padding']}, {a['output_padding']}, "
            f"{a['stride']}, {a['dilation']}, {a['groups']})"
        )
    if c.op in ("matmul", "add", "sub", "mul", "div"):
        return f"{a0}.{c.op}({r(1)})"
    if c.op in ("relu", "abs", "tanh", "exp", "silu"):
        return f"{a0}.{c.op}()"
    if c.op == "sum" or c.op == "mean":
        return f"{a0}.{c.op}{'_keepdim' if a.get('keepdim') else ''}({a.get('dim')!r})"
    return f"/* {c.op} {a}: see the probe file */ {a0}.clone()"


def burn_source(f: Finding, name: str) -> str:
    """A standalone burn 0.22 program (ndarray backend with autodiff) reproducing the
    finding with burn's own API."""
    c = f.case
    lines = [
        f"// {name}",
        "use burn::tensor::Device;",
        "use burn::tensor::{Tensor, TensorData};",
        "",
        "fn main() {",
        "    #[allow(deprecated)] // burn 0.22 deprecates ndarray; the study measured it",
        "    let dev = Device::ndarray().autodiff();",
    ]
    names = []
    for i, inp in enumerate(c.inputs):
        n = input_name(i)
        r = len(inp.stored_shape)
        vals = ", ".join(_f32(v) for v in inp.stored)
        lines.append(
            f"    let {n} = Tensor::<{r}>::from_data(TensorData::new(vec![{vals}], "
            f"{list(inp.stored_shape)}), &dev).require_grad();"
        )
        at = f"{n}.clone()"
        for j, (op, a) in enumerate(inp.route.steps):
            out = f"{n}_{j + 1}"
            call = {
                "transpose": f"swap_dims({a.get('dim0')}, {a.get('dim1')})",
                "narrow": f"narrow({a.get('dim')}, {a.get('start')}, {a.get('length')})",
                "broadcast_to": f"expand({list(a.get('shape', ()))})",
            }[op]
            rank = len(a["shape"]) if op == "broadcast_to" else None
            conv = f"::<{rank}, _>" if rank and rank != r else ""
            call = call.replace("expand(", f"expand{conv}(")
            lines.append(f"    let {out} = {at}.{call};")
            at = f"{out}.clone()"
        names.append(at)
    y = _burn_op(c, names)
    lines.append(f"    let y = {y};")
    w = ", ".join(_f32(v) for v in c.weights)
    lines += [
        (
            f"    let w = Tensor::<{len(c.out_shape)}>::from_data(TensorData::new(vec![{w}], "
            f"{list(c.out_shape)}), &dev);"
        ),
        "    let grads = (y.clone() * w).sum().backward();",
        '    println!("y = {}", y);',
    ]
    for i in range(len(c.inputs)):
        n = input_name(i)
        lines.append(
            f'    match {n}.grad(&grads) {{ Some(g) => println!("{n}.grad = {{g}}"), '
            f'None => println!("{n}.grad: none") }}'
        )
    lines.append("}")
    return "\n".join(lines) + "\n"


def _burn_op(c: Case, x: list[str]) -> str:
    a = {**probe_ops.op_defaults(c.op), **c.args}
    if c.op == "conv1d":
        return (
            f"burn::tensor::module::conv1d({x[0]}, {x[1]}, None, burn::tensor::ops::"
            f"ConvOptions::new([{a['stride']}], [{a['padding']}], [{a['dilation']}], "
            f"{a['groups']}))"
        )
    if c.op == "matmul":
        return f"{x[0]}.matmul({x[1]})"
    if c.op in ("add", "sub", "mul", "div"):
        return f"{x[0]}.{c.op}({x[1]})"
    if c.op in ("relu", "tanh", "sigmoid", "silu"):
        return f"burn::tensor::activation::{c.op}({x[0]})"
    return f"/* {c.op} {a}: see the probe file */ {x[0]}"


# ----- tables -----------------------------------------------------------------------------


def layout_text(f: Finding) -> str:
    """``x0: transpose; x1: contiguous``."""
    return "; ".join(
        f"{input_name(i)}: {' → '.join(r) or 'contiguous'}" for i, r in enumerate(f.layout)
    )


def markdown(rows: Sequence[Mapping], result: Campaign, seed: int, settings: Mapping) -> str:
    """The findings table as Markdown, with the campaign's settings, counts and control."""
    ctl = sum(len(v) for v in result.control_failures.values())
    out = [
        "# Layout fuzzer findings",
        "",
        (
            f"Seed {seed}; {result.cases} cases ({settings.get('cases_per_op')} per op, ops: "
            f"{', '.join(settings.get('ops', []))}); "
            "frameworks "
            + ", ".join(
                f"{fw} {settings['releases'][fw]}" if fw in settings.get("releases", {}) else fw
                for fw in settings.get("frameworks", [])
            )
            + "; "
            f"dtypes {', '.join(settings.get('dtypes', []))}."
        ),
        (
            f"{result.failing_cases} cases failed before shrinking; {len(rows)} findings after "
            "shrinking and merging. Control (PyTorch float32 through the routes vs contiguous): "
            f"{ctl} failing quantities."
        ),
        "Wall time: " + ", ".join(f"{k} {v:.0f} s" for k, v in result.seconds.items()) + ".",
        "",
        (
            "| op | framework | dtype | kind | layout | quantities | shapes | args | failing cases "
            "| known bug | related | probe |"
        ),
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        out.append(
            "| "
            + " | ".join(
                str(r[k]).replace("|", "/")
                for k in (
                    "op",
                    "framework",
                    "dtype",
                    "kind",
                    "layout",
                    "quantities",
                    "shapes",
                    "args",
                    "failing_cases",
                    "known_bug",
                    "related",
                )
            )
            + f" | {Path(r['probe']).name} |"
        )
    return "\n".join(out) + "\n"


def as_array(values) -> np.ndarray:
    """Values as a float64 array (tests)."""
    return np.asarray(values, dtype=np.float64)
