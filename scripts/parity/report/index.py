"""The index of ``results/`` (``results/README.md``): one place where a person finds the
answer. It lists every experiment and comparison with its verdict, its expectation and
its culprit, and links to the tables (Markdown, CSV) and figures (PNG) its jobs wrote;
then the summary, the probe table, the other pages and how to make the report.

It is made from the summary (``summary.csv``, its rows and verdicts) and the summary's
record (``summary.sources.json``, which lists each comparison's sealed result with its
sha256); each result names the files its job wrote (its ``tables``), so every link points
at a file a job wrote and ``check`` verifies. The index is a sealed page
(``parity.report.sealed``): a copy edited by hand fails ``check``, naming it.
"""

from __future__ import annotations

import csv
import os
from collections import Counter
from collections.abc import Mapping, Sequence

from parity.compare import verdicts
from parity.core import integrity, paths
from parity.render.markdown import md_text

#: Pages over the whole run the index links to: (title, path, what it answers). Made by
#: the default target beside the index (its rule waits for them).
PAGE_LINKS = (
    ("Summary", paths.SUMMARY.format(ext="md"), "every comparison's verdict and worst values"),
    ("Framework table", paths.FRAMEWORK_SUMMARY.format(ext="md"), "the study's table"),
    ("Release matrix", paths.VERSIONS_TABLE.format(ext="md"), "known faults by release"),
    ("Provenance", paths.PROVENANCE.format(ext="md"), "how and where each trace was made"),
    (
        "Optimizer defaults",
        paths.OPTIMIZER_DEFAULTS.format(ext="md"),
        "as each framework prints them",
    ),
    ("Training loop", paths.TRAINING_LOOP_PAGE, "PyTorch and candle side by side"),
)
#: The order in which a comparison's files are listed (result ``kind``).
KINDS = ("perstep", "split", "diagnosis", "localise", "crosshost")


def _link(text: str, path: str, base: str) -> str:
    return f"[{text}]({os.path.relpath(path, base)})"


def comparison_files(results: Sequence[str]) -> dict[tuple, list[tuple[str, dict]]]:
    """(experiment, comparison, device) → [(kind, the files it wrote: role → path)] of the
    sealed ``results`` (paths of comparison jobs' results) in :data:`KINDS` order; a
    result without those keys (none the summary reads today) is left out. Raises
    ``integrity.IntegrityError`` for a result that is not intact."""
    out: dict[tuple, list[tuple[str, dict]]] = {}
    for path in results:
        r = integrity.read_sealed_json(path)
        if not all(k in r for k in ("experiment", "comparison", "device")):
            continue
        kind = r.get("kind") or os.path.basename(path).split("-", 1)[0]
        files = {role: rec["path"] for role, rec in r.get("tables", {}).items()}
        out.setdefault((r["experiment"], r["comparison"], r["device"]), []).append((kind, files))
    for v in out.values():
        v.sort(key=lambda kf: KINDS.index(kf[0]) if kf[0] in KINDS else len(KINDS))
    return out


def _cells(files: list[tuple[str, dict]], base: str) -> tuple[str, str]:
    """The tables cell and the figures cell of one comparison's row."""
    tabs, figs = [], []
    for kind, f in files:
        if "md" in f:
            tabs.append(
                _link(kind, f["md"], base)
                + (f" ({_link('csv', f['csv'], base)})" if "csv" in f else "")
            )
        if "png" in f:
            figs.append(_link(kind, f["png"], base))
    return ", ".join(tabs) or "-", ", ".join(figs) or "-"


def _meets(verdict: str) -> bool:
    return verdict in verdicts.VERDICTS and verdicts.meets_expectation(verdict)


def _verdict(row: Mapping[str, str]) -> str:
    """The verdict; one ``check`` does not accept in bold, with the expected one."""
    v = md_text(row.get("verdict") or "", cell=True)
    want = md_text(row.get("expected_verdict") or "-", cell=True)
    return v if _meets(row.get("verdict") or "") else f"**{v}** (expected {want})"


def index_markdown(
    rows: Sequence[Mapping[str, str]],
    files: Mapping[tuple, list[tuple[str, dict]]],
    probe_rows: Sequence[Mapping[str, str]] | None,
    base: str = "results",
) -> str:
    """The index as Markdown: the verdict counts, the pages (:data:`PAGE_LINKS`), the
    probes (``probe_rows``, None without probes) and per experiment a table of its
    comparisons (``rows``: ``summary.csv``'s rows, in its order) with verdict, expectation,
    culprit and links to the files of :func:`comparison_files`. Links are relative to
    ``base``, the index's folder."""
    counts = Counter(r["verdict"] for r in rows)
    off = [r for r in rows if not _meets(r["verdict"])]
    named = ", ".join(md_text(f"{r['experiment']} {r['comparison']} {r['device']}") for r in off)
    intro = (
        "Written by the workflow's `index` job from the summary; `check` holds it to its "
        f"record (`{os.path.relpath(paths.INDEX_SOURCES, base)}`), so a copy edited by hand "
        "fails `check`. Every table and figure it links to is verified by `check` too."
    )
    out = [
        "# Results",
        "",
        intro,
        "",
        f"**{len(rows)} comparisons**: "
        + ", ".join(f"{n} {v}" for v, n in sorted(counts.items()))
        + f"; **{len(off)}** differ from their expectation"
        + (f": {named}." if off else "."),
        "",
        "## Pages",
        "",
    ]
    summary_md, summary_csv = (paths.SUMMARY.format(ext=e) for e in ("md", "csv"))
    for title, path, what in PAGE_LINKS:
        extra = f" ({_link('CSV', summary_csv, base)})" if path == summary_md else ""
        out.append(f"- {_link(title, path, base)}{extra}: {what}")
    if probe_rows is not None:
        pc = Counter(r["verdict"] for r in probe_rows)
        md, csv_ = (paths.PROBES_TABLE.format(ext=e) for e in ("md", "csv"))
        out.append(
            f"- {_link('Probes', md, base)} ({_link('CSV', csv_, base)}): "
            f"{len(probe_rows)} rows, " + ", ".join(f"{n} {v}" for v, n in sorted(pc.items()))
        )
    out.append(
        "- The report, `report.html`: made after `check` passes with "
        "`snakemake --report results/report.html` (Snakemake's, not a job's, so not sealed)"
    )
    out.append("")
    experiments: dict[str, list] = {}
    for r in rows:
        experiments.setdefault(r["experiment"], []).append(r)
    for exp, exp_rows in experiments.items():
        out += [
            f"## {exp}",
            "",
            "| comparison | device | verdict | culprit | tables | figures |",
            "|---|---|---|---|---|---|",
        ]
        for r in exp_rows:
            tabs, figs = _cells(files.get((exp, r["comparison"], r["device"]), []), base)
            culprit = r.get("culprit") or "-"
            cells = [
                md_text(r["comparison"], cell=True),
                md_text(r["device"], cell=True),
                _verdict(r),
                md_text(culprit, cell=True),
                tabs,
                figs,
            ]
            out.append("| " + " | ".join(cells) + " |")
        out.append("")
    return "\n".join(out)


def write_index(
    summary_csv: str, summary_record: str, probes_csv: str | None, out: str = paths.INDEX
) -> str:
    """Write the index (:func:`index_markdown`) at ``out`` atomically from ``summary_csv``,
    the results ``summary_record`` lists and ``probes_csv`` (None without probes); returns
    ``out``. Raises ``integrity.IntegrityError`` for a record or result not intact,
    FileNotFoundError for one that is gone."""
    from parity.core.fileio import write_text_atomic

    with open(summary_csv, encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    record = integrity.read_sealed_json(summary_record)
    results = [r["path"] for r in record["made_from"].values()]
    probe_rows = None
    if probes_csv is not None:
        with open(probes_csv, encoding="utf-8") as f:
            probe_rows = list(csv.DictReader(f))
    text = index_markdown(rows, comparison_files(results), probe_rows, os.path.dirname(out))
    write_text_atomic(out, text)
    return out
