"""What a campaign's findings say: the table's rows and Markdown and one probe file per
finding (written by ``parity.fuzz.job``; the framework-native reproductions are
``repro``'s).

**Known or new.** A finding is *known* when a case of a probe file in ``probes/`` has a
``known_bug`` entry for the finding's framework whose op, kind and layout equal the
finding's: the case's one non-layout step is the same op, a quantity its ``known_bug``
lists has the finding's kind (``check.kind_of``), and per input position the layout steps
between the leaf and the op (a ``contiguous`` step clears them) have the same kinds as
the finding's minimal route. Where only op, framework and kind agree the table names the
probe as *related* (probably the same fault reached through another layout). A
``known_bug`` whose ``versions`` list leaves out the release a finding was found in
(``Finding.release``: the campaign runs every release of ``candle.versions`` and
``burn.versions``) neither covers nor relates to it: that release is recorded as not
having the bug.

**Probe files** are the minimal case as a probe document (``generate.to_doc``) with a
``known_bug`` entry per framework failing on it, holding its values (or its outcome:
``framework-error``, ``missing-gradient``, ``non-finite``) under device ``cpu``, with
``versions`` naming the releases that fail so where some release of the campaign does
not, so the normal probes target reports them as ``known-bug`` (reproduced) — ready to
move into ``probes/``. A quantity whose values differ between two runs (memory read outside the
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
from typing import Any

import numpy as np

from parity.fuzz.campaign import Campaign, Finding
from parity.fuzz.check import ERROR, MISSING_GRAD, kind_of
from parity.fuzz.generate import input_name, to_doc
from parity.probe import loader
from parity.probe import ops as probe_ops
from parity.probe.shapes import table as probe_shapes

COLUMNS = (
    "op",
    "framework",
    "release",
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
    source: str | Path | Sequence[str | Path],
    releases: Mapping[str, str] | None = None,
    limits: Mapping[str, Any] | None = None,
) -> list[dict]:
    """Every case of the probes of ``source`` (a folder, or a list of probe files) with a
    ``known_bug``, as ``{"probe",
    "case", "op", "framework", "kinds", "layout"}`` (one entry per framework): ``layout``
    the per-input tuple of layout step kinds before the case's one op, ``kinds`` those of
    its known-bug quantities, ``versions`` the releases it names (None: every one). Cases
    with several non-layout ops are left out, and so is a framework's entry whose
    ``versions`` list does not name that framework's release in ``releases`` (framework →
    one release; None or a framework missing from it: every entry counts; ``classify``
    matches each finding's own release). Each probe file is read within ``limits`` (the
    config's, ``parity.plan.limits.settings``; default its defaults), as the probe plan
    read it, so a probe the config lets the plan accept is not refused here."""
    releases = releases or {}
    out = []
    if isinstance(source, (str, Path)):
        found = loader.discover(source, limits=limits)
    else:
        found = {(p := loader.load(path, limits)).name: p for path in source}
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
                        "versions": named,
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
    """(known bugs covering ``f``, related known bugs) as ``probe:case`` names, of the
    entries whose ``versions`` name ``f``'s release (every entry where either is not
    given); an error or missing gradient in a backward pass that the op's ``x-support``
    documents for the framework ("no backward") is known as ``x-support``."""
    same, related = [], []
    support = probe_ops.op_support(f.op).get(f.framework, "").lower()
    note = " ".join(x.message.lower() for x in f.failures)
    if f.kind in (ERROR, MISSING_GRAD) and "no backward" in support and "backward" in note:
        same.append("x-support")
    for k in known:
        if (k["op"], k["framework"]) != (f.op, f.framework) or f.kind not in k["kinds"]:
            continue
        if k.get("versions") is not None and f.release and f.release not in k["versions"]:
            continue
        name = f"{k['probe']}:{k['case']}"
        layout = tuple(tuple(x for x in r if x in ROUTE_OPS) for r in k["layout"])
        (same if layout == f.layout else related).append(name)
    return same, related


# ----- probe files ------------------------------------------------------------------------


def probe_name(f: Finding, index: int) -> str:
    """``fuzz_{op}_{framework}_{kind}_{index}`` (kind with underscores)."""
    return f"fuzz_{f.op}_{f.framework}_{f.kind.replace(' ', '_')}_{index:02d}"


def release_text(f: Finding) -> str:
    """``candle 0.11.1`` (the framework alone where the finding names no release)."""
    return f"{f.framework} {f.release}".strip()


def values_text(values: Iterable[float] | None) -> str:
    """Values as a comment shows them: ``[1, 0.5, -2]`` (``%g``), ``—`` for none."""
    if values is None:
        return "—"
    return "[" + ", ".join(f"{v:g}" for v in values) + "]"


def probe_doc(
    f: Finding, name: str, seed: int, releases: Mapping[str, Sequence[str]] | None = None
) -> tuple[dict, str]:
    """(probe document, comment header) of a finding. ``releases``: framework → the
    releases the campaign ran; a framework's ``known_bug`` entry holds the outcomes of the
    finding's release (another framework's: of its first failing release) and names in
    ``versions`` the releases with the same outcomes, where that is not every release the
    campaign ran."""
    doc = to_doc(
        f.case,
        f"Layout fuzzer finding ({f.framework} {f.release} {f.dtype}, {f.kind}): ".replace(
            "  ", " "
        )
        + to_doc(f.case)["description"],
    )
    per_release: dict = {}
    for x in f.all_failures or f.failures:
        if (x.framework, x.release, x.quantity) in f.unstable:
            continue
        if x.kind in (ERROR, MISSING_GRAD):
            value = x.verdict
        elif x.verdict == "non-finite" or x.values is None:
            value = "non-finite"
        else:
            value = [_num(v) for v in x.values]
        per_release.setdefault(x.framework, {}).setdefault(x.release, {})[x.quantity] = value
    bugs: dict = {}
    for fw, by_release in sorted(per_release.items()):
        own = f.release if fw == f.framework and f.release in by_release else None
        chosen = by_release[own if own is not None else next(iter(by_release))]
        same = [r for r, v in by_release.items() if v == chosen]
        ran = list((releases or {}).get(fw) or [])
        entry: dict = {}
        if ran and any(r not in same for r in ran) and all(same):
            entry["versions"] = [r for r in ran if r in same]
        entry["cpu"] = chosen
        bugs[fw] = entry
    if bugs:
        doc["cases"]["case"]["known_bug"] = bugs
    lines = [
        f"# {name}: found by the layout fuzzer (seed {seed}), shrunk from {', '.join(f.sources)}.",
        f"# {f.framework} {f.release} {f.dtype} {f.kind}:".replace("  ", " "),
    ]
    for fw, rel, q in sorted(f.unstable):
        lines.append(
            f"# {fw} {rel} {q}: values differ between runs (memory outside the tensor "
            "read?): no known_bug values recorded, the verdict is fail".replace("  ", " ")
        )
    for x in f.failures:
        lines.append(f"#   {x.quantity}: {x.message[:300]}")
        lines.append(f"#   PyTorch {x.dtype}: {x.quantity} = {values_text(x.reference)}")
    return doc, "\n".join(lines) + "\n"


def _num(v: float):
    if not math.isfinite(v):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")
    return int(v) if float(v).is_integer() else float(v)


# ----- tables -----------------------------------------------------------------------------


def layout_text(f: Finding) -> str:
    """``x0: transpose; x1: contiguous``."""
    return "; ".join(
        f"{input_name(i)}: {' → '.join(r) or 'contiguous'}" for i, r in enumerate(f.layout)
    )


def releases_of(settings: Mapping, framework: str) -> list[str]:
    """The releases of ``framework`` a campaign's settings name (``releases``: framework →
    a list, or one release), [] where they name none."""
    given = (settings.get("releases") or {}).get(framework) or []
    return [given] if isinstance(given, str) else list(given)


def markdown(rows: Sequence[Mapping], result: Campaign, seed: int, settings: Mapping) -> str:
    """The findings table as Markdown, with the campaign's settings, counts and control."""
    ctl = sum(len(v) for v in result.control_failures.values())
    per: dict[str, int] = {}
    for r in rows:
        label = f"{r['framework']} {r['release']}".strip()
        per[label] = per.get(label, 0) + 1
    out = [
        "# Layout fuzzer findings",
        "",
        (
            f"Seed {seed}; {result.cases} cases ({settings.get('cases_per_op')} per op, ops: "
            f"{', '.join(settings.get('ops', []))}); "
            "frameworks "
            + ", ".join(
                f"{fw} {' and '.join(releases_of(settings, fw))}".strip()
                for fw in settings.get("frameworks", [])
            )
            + "; "
            f"dtypes {', '.join(settings.get('dtypes', []))}."
        ),
        (
            f"{result.failing_cases} cases failed before shrinking; {len(rows)} findings after "
            "shrinking and merging ("
            + (", ".join(f"{k}: {v}" for k, v in sorted(per.items())) or "none")
            + "). Control (PyTorch float32 through the routes vs contiguous): "
            f"{ctl} failing quantities."
        ),
        "Wall time: " + ", ".join(f"{k} {v:.0f} s" for k, v in result.seconds.items()) + ".",
        "",
        (
            "| op | framework | release | dtype | kind | layout | quantities | shapes | args "
            "| failing cases | known bug | related | probe |"
        ),
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        out.append(
            "| "
            + " | ".join(
                str(r[k]).replace("|", "/")
                for k in (
                    "op",
                    "framework",
                    "release",
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
