"""CSV tables and their Markdown twins, laid out like the study's tables.

CSV files hold every recorded step at full precision (shortest round-trip repr); the
Markdown twins show the study's selection of steps (1, 2, 3, 5, 10, 20, 30, … and the last)
with its number formats (losses to 8 decimals, differences as ``%.2e``).
"""

from __future__ import annotations

import csv
import html
import io
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from parity.core.fileio import write_text_atomic
from parity.render.markdown import LINE_BREAKS, md_text

PERSTEP_COLUMNS = ("step", "loss_a", "loss_b", "dloss", "max_dparam", "where")
#: The per-step table's further columns for runs with a training loop (docs/loop.md):
#: ``compare.maths.loop_columns``.
LOOP_COLUMNS = (
    "lr_a",
    "lr_b",
    "dlr",
    "grad_norm_a",
    "grad_norm_b",
    "dgrad_norm",
    "clip_coef_a",
    "clip_coef_b",
    "dclip_coef",
)
SPLIT_COLUMNS = ("step", "max_dparam", "torch_f64", "candle_f64", "f64_f64")
#: The localisation table (``parity.localise.walk``): one row per quantity of the replayed step.
LOCALISE_COLUMNS = (
    "order",
    "phase",
    "quantity",
    "shape",
    "max_abs_diff",
    "where",
    "ulp",
    "fp64_ratio",
    "f64_f64",
    "f64_threshold",
    "verdict",
    "note",
)
PROBE_COLUMNS = (
    "probe",
    "case",
    "quantity",
    "framework",
    # The framework's release for candle and burn (config candle.versions); empty for torch.
    "version",
    "device",
    "dtype",
    "shape",
    "values",
    "reference",
    "reference_values",
    "max_diff",
    "tolerance",
    "verdict",
    "note",
    # The float64-referenced rule (f32, f16, bf16 rows against PyTorch in their dtype).
    "reference64_values",
    "fp64_diff",
    "reference_fp64_diff",
)
#: Values a Markdown cell of the probe table shows before eliding the rest.
PROBE_MD_VALUES = 8


def _cell(v) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return repr(v)
    return str(v)


def csv_text(rows: Iterable[Mapping], columns: Sequence[str]) -> str:
    """CSV with exactly ``columns``; None is an empty cell, floats use ``repr``."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(columns)
    for r in rows:
        w.writerow([_cell(r[c]) for c in columns])
    return buf.getvalue()


def write_csv(path: str, rows: Iterable[Mapping], columns: Sequence[str]) -> None:
    """Write :func:`csv_text` atomically."""
    write_text_atomic(path, csv_text(rows, columns))


def display_steps(steps: Sequence[int]) -> list[int]:
    """The study's step selection: 1, 2, 3, 5, 10, then every 10, and the last step."""
    steps = [s for s in steps if s > 0]
    if not steps:
        return []
    wanted = {1, 2, 3, 5, steps[-1], *range(10, steps[-1] + 1, 10)}
    return [s for s in steps if s in wanted]


def _sci(v) -> str:
    if v is None:
        return ""
    if isinstance(v, float) and math.isnan(v):
        return "NaN"
    return f"{v:.2e}"


def _fixed(v) -> str:
    return "" if v is None else f"{v:.8f}"


def _pipe_cell(c: str) -> str:
    """A cell of Markdown (already escaped where it holds text): an unescaped ``|``
    escaped, a line break a space, so that the row stays one row."""
    out, backslashes = [], 0
    for ch in c:
        if ch == "|" and backslashes % 2 == 0:
            out.append("\\")
        out.append(" " if ch in LINE_BREAKS else ch)
        backslashes = backslashes + 1 if ch == "\\" else 0
    return "".join(out)


def _markdown(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    esc = [_pipe_cell(h) for h in header]
    lines = ["| " + " | ".join(esc) + " |", "|" + "|".join("---:" for _ in header) + "|"]
    lines += ["| " + " | ".join(_pipe_cell(c) for c in r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def perstep_markdown(rows: Sequence[Mapping], title: str, notes: Sequence[str] = ()) -> str:
    """Markdown twin of a per-step table (study layout); with a training loop's columns, the
    reference's learning rate and the differences of the loop's scalars too."""
    by_step = {r["step"]: r for r in rows}
    loop = bool(rows) and "dlr" in rows[0]
    body = [
        [
            str(s),
            _fixed(by_step[s]["loss_a"]),
            _fixed(by_step[s]["loss_b"]),
            _sci(by_step[s]["dloss"]),
            _sci(by_step[s]["max_dparam"]),
            f"`{by_step[s]['where']}`",
            *(
                [_sci(by_step[s][c]) for c in ("lr_a", "dlr", "dgrad_norm", "dclip_coef")]
                if loop
                else []
            ),
        ]
        for s in display_steps(list(by_step))
    ]
    header = ["step", "loss_a", "loss_b", "|dloss|", "max|dparam|", "where"]
    if loop:
        header += ["lr (ref)", "|dlr|", "|dgrad_norm|", "|dclip_coef|"]
    return _page(title, notes, _markdown(header, body))


def split_markdown(
    rows: Sequence[Mapping], title: str, reference: str, candidate: str, notes: Sequence[str] = ()
) -> str:
    """Markdown twin of a split table; the f64 columns are labelled with the run names."""
    by_step = {r["step"]: r for r in rows}
    body = [
        [str(s)] + [_sci(by_step[s][c]) for c in SPLIT_COLUMNS[1:]]
        for s in display_steps(list(by_step))
    ]
    header = ["step", "max|dparam|", f"{reference}-f64", f"{candidate}-f64", "f64-f64"]
    return _page(title, notes, _markdown(header, body))


def _page(title: str, notes: Sequence[str], table: str) -> str:
    parts = [f"# {title}\n"]
    if notes:
        parts.append("\n".join(f"- {n}" for n in notes) + "\n")
    parts.append(table)
    return "\n".join(parts)


def number(v: float) -> str:
    """A value as the probe table writes it: integers without a fraction, others in their
    shortest round-trip form (``repr``), ``inf``, ``-inf``, ``nan``."""
    if math.isfinite(v) and v == int(v) and abs(v) < 2**53:
        return str(int(v))
    return repr(float(v))


def shape_text(shape: Sequence[int] | None) -> str:
    """``[2, 3]``; ``[]`` for a scalar; empty for no shape."""
    return "" if shape is None else f"[{', '.join(str(int(d)) for d in shape)}]"


def values_text(values: Sequence[float] | None, limit: int | None = None) -> str:
    """``[340, 392, 444]``; with ``limit``, at most that many values then ``… (n values)``."""
    if values is None:
        return ""
    vals = list(values)
    shown = vals if limit is None or len(vals) <= limit else vals[:limit]
    text = ", ".join(number(v) for v in shown)
    if len(shown) < len(vals):
        text += f", … ({len(vals)} values)"
    return f"[{text}]"


def probes_markdown(
    rows: Sequence[Mapping],
    descriptions: Mapping[str, str],
    notes: Mapping[str, Sequence[str]],
    wording: Mapping[str, str],
) -> str:
    """Markdown twin of the probe table: one section per probe (its description and case
    notes), values elided after :data:`PROBE_MD_VALUES`, verdicts in words (``wording``:
    a verdict → its words, ``verdicts.PROBE_WORDING``; others as they are)."""
    parts = ["# Probes\n"]
    header = [
        "case",
        "quantity",
        "framework",
        "device",
        "dtype",
        "shape",
        "values",
        "reference",
        "max diff",
        "tolerance",
        "verdict",
        "note",
    ]
    for probe, text in descriptions.items():
        mine = [r for r in rows if r["probe"] == probe]
        body = [
            [
                md_text(r["case"], cell=True),
                f"`{r['quantity']}`",
                md_text(f"{r['framework']} {r.get('version') or ''}".strip(), cell=True),
                md_text(r["device"], cell=True),
                md_text(r["dtype"], cell=True),
                shape_text(r.get("shape")),
                values_text(r["values"], PROBE_MD_VALUES),
                md_text(
                    f"{r['reference']} {values_text(r['reference_values'], PROBE_MD_VALUES)}",
                    cell=True,
                ).strip(),
                _sci(r["max_diff"]),
                _sci(r["tolerance"]),
                md_text(wording.get(r["verdict"], r["verdict"]), cell=True),
                # a framework's message: on a remote host's row, the remote's text
                md_text(r["note"], cell=True),
            ]
            for r in mine
        ]
        section = f"## {probe}\n\n{text}\n"
        if notes.get(probe):
            section += "\n" + "\n".join(f"- {n}" for n in notes[probe]) + "\n"
        parts.append(section + "\n" + _markdown(header, body))
    return "\n".join(parts)


def _table_cell(text: str, raw: bool) -> str:
    return text if raw else md_text(text, cell=True)


def markdown_table(
    rows: Sequence[Mapping], columns: Sequence[str], formats=None, raw: Sequence[str] = ()
) -> str:
    """A plain Markdown table of ``columns``; ``formats`` maps a column to a formatter.
    Every cell is text, escaped with :func:`md_text` (so a value holding a newline, ``|``,
    a backtick or ``<script>`` stays one cell that reads as itself), except the cells of
    the columns in ``raw``, which the caller wrote as Markdown (escaping any text in them
    with :func:`md_text` itself)."""
    formats = formats or {}
    body = [[_table_cell(formats.get(c, _cell)(r.get(c)), c in raw) for c in columns] for r in rows]
    return _markdown(list(columns), body)


sci = _sci


def diagnosis_markdown(rows: Sequence[Mapping], result: Mapping, comp) -> str:
    """Markdown twin of a diagnosis table: the localised findings, then selected steps."""

    def at(step, where):
        return "never" if step is None else f"step {step} (`{where}`)"

    notes = [
        (
            f"pair: {comp.reference.label} vs {comp.candidate.label}; f64 pair: "
            f"{comp.f64_pair[0].label} vs {comp.f64_pair[1].label}"
        ),
        f"f32 difference first exceeds the tolerance {comp.tolerance:g}: "
        + at(result["tol_exceeded_step"], result["tol_exceeded_where"]),
        "f64 vs f64 first leaves float64 rounding (threshold "
        f"{result['f64_rounding_factor']:g} · 2^-29 · f32 drift): "
        + at(result["f64_divergence_step"], result["f64_divergence_where"]),
        "first ReLU flip between the f32 runs: "
        + (
            "none"
            if result["relu_flip_step"] is None
            else f"step {result['relu_flip_step']}, unit `{result['relu_flip_unit']}`, "
            f"active samples {result['relu_flip_counts']}"
        ),
        "first ReLU flip between the f64 runs: "
        + (
            "none"
            if result["relu_flip64_step"] is None
            else f"step {result['relu_flip64_step']}, unit `{result['relu_flip64_unit']}`, "
            f"active samples {result['relu_flip64_counts']}"
        ),
        (
            "the two f32 runs' largest errors against their own f64 runs sit at the same "
            f"parameter with the same sign through step {result['signed_agreement_until']}"
        ),
        f"fp64-referenced rule: {result['fp64_rule_verdict']}, worst ratio "
        f"RMSE(ref64 − cand32) / RMSE(ref64 − ref32) = {result['fp64_worst_ratio']:.3g}"
        + (
            ""
            if result["fp64_rule_first_fail"] is None
            else f" (first fails at step {result['fp64_rule_first_fail']})"
        ),
        f"largest ULP distance between the f32 runs: {result['worst_ulp']:g}",
    ]
    by_step = {r["step"]: r for r in rows}
    body = []
    for s in display_steps(list(by_step)):
        r = by_step[s]
        body.append(
            [
                str(s),
                _sci(r["max_dparam"]),
                f"{r['ulp_at_max']:g} / {r['max_ulp']:g}",
                _sci(r["rmse"]),
                _sci(r["f64_f64"]),
                _sci(r["f64_threshold"]),
                f"{r['ref_err']:.3e} `{r['ref_err_where']}`",
                f"{r['cand_err']:.3e} `{r['cand_err_where']}`",
                "yes" if r["same_error"] else "no",
                "" if r["relu_flips_f32"] is None else str(r["relu_flips_f32"]),
                "" if r["relu_flips_f64"] is None else str(r["relu_flips_f64"]),
            ]
        )
    header = [
        "step",
        "max|dparam|",
        "max ULP",
        "RMSE",
        "f64-f64",
        "f64 threshold",
        "ref32−ref64",
        "cand32−cand64",
        "same",
        "ReLU flips f32",
        "ReLU flips f64",
    ]
    return _page(
        f"{comp.experiment}: {comp.name} on {comp.device}, diagnosis",
        notes,
        _markdown(header, body),
    )


_ASCII_PUNCT = frozenset("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }
table { border-collapse: collapse; font-size: 0.85em; margin: 1em 0; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: right; }
th { background: #f0f0f0; }
td:first-child, th:first-child { text-align: left; }
code { background: #f5f5f5; padding: 0 0.2em; }
li { margin: 0.2em 0; }
"""


def _inline(text: str) -> str:
    """Markdown inline code and bold to HTML, a backslash-escaped punctuation character
    (:func:`md_text`) as that character, everything else escaped."""
    out, i, bold = [], 0, False
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text) and text[i + 1] in _ASCII_PUNCT:
            out.append(html.escape(text[i + 1]))
            i += 2
            continue
        if c == "`":
            end = text.find("`", i + 1)
            if end != -1:
                code = text[i + 1 : end].replace("\\|", "|")
                out.append(f"<code>{html.escape(code)}</code>")
                i = end + 1
                continue
        if text.startswith("**", i) and (bold or text.find("**", i + 2) != -1):
            out.append("</b>" if bold else "<b>")
            bold = not bold
            i += 2
            continue
        out.append(html.escape(c))
        i += 1
    return "".join(out)


def markdown_to_html(md: str) -> str:
    """A standalone HTML page from the Markdown twins this module writes (headings, bullet
    lists, paragraphs and pipe tables); the report shows these."""
    body, title = [], "table"
    lines = md.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("#"):
            level = len(line) - len(line.lstrip("#"))
            text = line[level:].strip()
            title = text if level == 1 else title
            body.append(f"<h{level}>{_inline(text)}</h{level}>")
        elif line.startswith("- "):
            items = []
            while i < len(lines) and lines[i].startswith("- "):
                items.append(f"<li>{_inline(lines[i][2:])}</li>")
                i += 1
            body.append("<ul>" + "".join(items) + "</ul>")
            continue
        elif line.startswith("|"):
            rows = []
            while i < len(lines) and lines[i].startswith("|"):
                rows.append(lines[i])
                i += 1
            cells = [re.split(r"(?<!\\)\|", r.strip())[1:-1] for r in rows]
            head = "".join(f"<th>{_inline(c.strip())}</th>" for c in cells[0])
            trs = [
                "<tr>" + "".join(f"<td>{_inline(c.strip())}</td>" for c in r) + "</tr>"
                for r in cells[2:]
            ]
            body.append(
                f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(trs)}</tbody></table>"
            )
            continue
        elif line.strip():
            body.append(f"<p>{_inline(line)}</p>")
        i += 1
    return (
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{_STYLE}</style></head><body>{''.join(body)}</body></html>\n"
    )


def write_twins(md_path: str, md_text: str) -> None:
    """Write a Markdown twin and its HTML rendering (same path, ``.html``) atomically."""
    write_text_atomic(md_path, md_text)
    write_text_atomic(str(Path(md_path).with_suffix(".html")), markdown_to_html(md_text))
