#!/usr/bin/env python3
"""Writes docs/probe-reference.md from schemas/probe.schema.yaml, so that the reference and
the schema cannot disagree: every op with its inputs, arguments (type, default,
description) and the function that runs it in each framework (``x-support``), the
documented API limits (``parity.probe.api_limits``, the one table of them), the
optimizers, gradient accumulation and the gradient transforms, and the fields of inputs
and cases.

    python scripts/dev/probe_reference.py           # rewrite docs/probe-reference.md
    python scripts/dev/probe_reference.py --check   # exit 1 when the file is not current

``tests/test_probes.py`` holds the committed file equal to :func:`render`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))

from parity.probe import api_limits
from parity.probe import ops as probe_ops

OUTPUT = REPO / "docs" / "probe-reference.md"
FRAMEWORKS = ("torch", "candle", "burn")
UNSUPPORTED = "unsupported: "


def _text(s: Any) -> str:
    """One line of Markdown table text."""
    return " ".join(str(s).split()).replace("|", "\\|")


def _type(node: Mapping) -> str:
    """How an argument is written, from its (resolved) schema node."""
    if node.get("x-pair"):
        low = node["oneOf"][0].get("minimum", 0)
        return f"integer ≥ {low}, or [h, w]"
    if "enum" in node:
        return " \\| ".join(f"`{v}`" for v in node["enum"])
    if "oneOf" in node:
        return " or ".join(_type(probe_ops.resolve_ref(n)) for n in node["oneOf"])
    kind = node.get("type")
    if kind == "array":
        items = probe_ops.resolve_ref(node.get("items", {}))
        n = node.get("minItems")
        size = f" of {n}" if n is not None and n == node.get("maxItems") else ""
        return f"list{size} of {_type(items)}s"
    if kind in ("integer", "number"):
        bounds = []
        if "minimum" in node:
            bounds.append(f"≥ {node['minimum']}")
        if "exclusiveMinimum" in node:
            bounds.append(f"> {node['exclusiveMinimum']}")
        if "exclusiveMaximum" in node:
            bounds.append(f"< {node['exclusiveMaximum']}")
        return " ".join([kind, *bounds])
    if "pattern" in node:
        return "name"
    return str(kind or "value")


def _default(node: Mapping, required: bool) -> str:
    if "x-default-from" in node:
        return f"= {node['x-default-from']}"
    if "default" in node:
        d = node["default"]
        if d is None:
            return "every dimension" if node.get("x-normalized-as") == "dims" else "none"
        return f"`{str(d).lower() if isinstance(d, bool) else d}`"
    return "required" if required else "—"


def _arguments(node: Mapping) -> list[str]:
    """A Markdown table of the arguments of an op or optimizer (``in``/``out`` left out)."""
    required = set(node.get("required", []))
    rows = []
    for arg, spec in node["properties"].items():
        if arg in ("in", "out"):
            continue
        spec = probe_ops.resolve_ref(spec)
        desc = spec.get("description", "")
        if spec.get("x-normalized-as"):
            desc = f"{desc} (normalized as `{spec['x-normalized-as']}`)".strip()
        rows.append(
            f"| `{arg}` | {_type(spec)} | {_default(spec, arg in required)} | {_text(desc)} |"
        )
    if not rows:
        return ["No arguments.", ""]
    return ["| argument | type | default | description |", "|---|---|---|---|", *rows, ""]


def _support(node: Mapping, op: str | None = None) -> list[str]:
    support = node.get("x-support", {})
    rows = []
    for fw in FRAMEWORKS:
        text = _text(support.get(fw, "not stated"))
        for x in api_limits.limits_of(op or ""):
            if x.framework == fw:
                text += f"; unsupported: {_text(x.condition)} ([limits](#limits))"
        rows.append(f"| {fw} | {text} |")
    return ["| framework | function |", "|---|---|", *rows, ""]


def _mark(text: str, limited: bool = False) -> str:
    """✓ supported, partial (an argument unsupported, or a documented limit), ✗
    unsupported."""
    if text.startswith(UNSUPPORTED):
        return "✗"
    return "partial" if f"; {UNSUPPORTED}" in text or limited else "✓"


def _limits() -> list[str]:
    """The section of the documented API limits, from ``api_limits.LIMITS``."""
    rows = [
        f"| [`{op}`](#{op}) | {fw} | {_text(cond)} | {_text(reason)} | [source]({src}) |"
        for op, fw, cond, reason, src in api_limits.rows()
    ]
    return [
        "## Limits",
        "",
        "Valid steps a framework refuses by design: it documents the limit or checks it",
        "before computing anything. A case with such a step is not run there; each of its",
        "quantities is `unsupported` with the reason (`scripts/parity/probe/api_limits.py`,",
        "the one table of them, which this section is generated from). The probes target",
        "and the layout fuzzer both follow it. A backward pass goes through a step when the",
        "case has a loss and the step's input depends on an input with `requires_grad`.",
        "",
        "| op | framework | when | reason | documented in |",
        "|---|---|---|---|---|",
        *rows,
        "",
    ]


def _fields(node: Mapping) -> list[str]:
    rows = []
    for key, spec in node["properties"].items():
        spec = probe_ops.resolve_ref(spec)
        rows.append(f"| `{key}` | {_text(spec.get('description', ''))} |")
    return ["| field | meaning |", "|---|---|", *rows, ""]


def _accumulation(defs: Mapping) -> list[str]:
    """The section of gradient accumulation (the loop keys of ``optimizer`` besides the
    optimizer and ``steps``) and of the gradient transforms, with each framework's function."""
    loop = defs["optimizer"]["properties"]
    out = [
        "## Gradient accumulation and transforms",
        "",
        (
            "`optimizer: {<name>: {...}, steps: n, accumulate: k, micro_batches: {x: xs}, "
            "grad: [...]}`."
        ),
        "",
        "| key | meaning |",
        "|---|---|",
    ]
    for key in ("accumulate", "micro_batches", "grad"):
        out.append(f"| `{key}` | {_text(loop[key]['description'])} |")
    out += [
        "",
        (
            "Accumulation: torch: `loss.backward()` k times without clearing `.grad` (it "
            "adds); candle: the `GradStore` of each `backward()` added into the first with "
            "`GradStore::extend` (candle has no accumulating `.grad`); burn: "
            "`burn::optim::GradientsAccumulator` (`accumulate`, then `grads`). A micro-batch "
            "row is `xs[m]` (torch), `narrow(0, m, 1)` then `squeeze` (candle, burn)."
        ),
        "",
        _text(defs["grad_transforms"]["description"]),
        "",
    ]
    for name, node in defs["grad_transforms"].items():
        if name == "description":
            continue
        out += [f"### {name}", "", _text(node["description"]), ""]
        out += _support(node)
    return out


def render() -> str:
    """The reference page, from the schema."""
    schema = probe_ops.schema()
    defs = schema["$defs"]
    ops = probe_ops.op_names()
    out = [
        "# Probe reference",
        "",
        "<!-- Generated by scripts/dev/probe_reference.py from schemas/probe.schema.yaml;",
        "     do not edit: change the schema and run the script. -->",
        "",
        "Every op, argument and optimizer a probe file (docs/probes.md) may use, with its",
        "default and the function that runs it in each framework. *partial*: the framework",
        "runs the op but its API lacks an argument or a value, or refuses some arguments by",
        "design ([limits](#limits)), so the cases that use them are `unsupported` there; ✗:",
        "its API lacks the op.",
        "",
        "## Frameworks",
        "",
    ]
    for fw in FRAMEWORKS:
        out.append(f"- **{fw}**: {_text(schema['x-frameworks'][fw])}")
    out += ["", "## Ops", "", "| op | " + " | ".join(FRAMEWORKS) + " |", "|---|---|---|---|"]
    for op in ops:
        support = defs["ops"][op].get("x-support", {})
        limited = {x.framework for x in api_limits.limits_of(op)}
        marks = " | ".join(_mark(support.get(fw, ""), fw in limited) for fw in FRAMEWORKS)
        out.append(f"| [`{op}`](#{op}) | {marks} |")
    out.append("")
    for op in ops:
        node = defs["ops"][op]
        out += [f"### {op}", "", _text(node.get("description", "")), ""]
        out += [f"Inputs: {_text(node.get('x-inputs', ''))}.", ""]
        out += _arguments(node)
        out += _support(node, op)
    out += _limits()
    out += [
        "## Optimizers",
        "",
        "`optimizer: {<name>: {arguments}, steps: n}`. " + _text(defs["optimizer"]["description"]),
        "",
    ]
    for name, node in defs["optimizers"].items():
        if name == "description":
            continue
        out += [f"### {name}", "", _text(node["description"]), ""]
        out += _arguments(node)
        out += _support(node)
    out += _accumulation(defs)
    out += ["## Inputs", "", _text(defs["input"]["description"]), ""]
    out += _fields(defs["input"])
    out += ["## Cases", ""]
    out += _fields(defs["case"])
    out += ["## Quantities", "", _text(defs["quantity"]["description"]), ""]
    return "\n".join(out).rstrip("\n") + "\n"


def main(argv: list[str] | None = None) -> int:
    """Write (or with ``--check``, compare) docs/probe-reference.md; returns the exit code."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the file is stale")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = OUTPUT.read_text(encoding="utf-8") if OUTPUT.exists() else ""
        if current != text:
            print(f"{OUTPUT.relative_to(REPO)} is stale: run {Path(__file__).name}")
            return 1
        return 0
    OUTPUT.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
