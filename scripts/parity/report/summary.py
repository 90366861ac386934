"""The summary of every comparison: one row per comparison (and per cross-host row of a
remote host), ``summary.csv``, its Markdown twin and its record.

A summary is never shown as current when it is not: ``summary.csv`` comes with
``summary.sources.json`` (``integrity.write_record``: the run, and the sha256 of every
result it was made from). After a failed run, ``parity.report.partial`` keeps it only if
every result it was made from is still the current result of its comparison, else
removes it and writes ``summary.partial.*`` beside it with the rows of this module. Both
are written under one lock, so two runs in one folder never both rewrite them.

With remote hosts (config ``remote``), the summary also gathers each host's cross-host
results (``parity.remote.crosshost``): their rows are summary rows whose device is the remote's
label (``cpu@mac``), judged by the same ``parity.compare.verdicts``.

Plain functions of what the rules resolved and of paths; ``scripts/summary.py`` is a thin
adapter. The check that gates on the summary is ``parity.report.check``, the study's
framework table ``parity.report.framework``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from parity.compare import verdicts
from parity.core import integrity, paths
from parity.core.config import canonical_hash
from parity.core.fileio import exclusive_lock
from parity.remote import crosshost
from parity.render import tables
from parity.render.markdown import md_text

#: How long the summary job waits for another run's ``onerror`` to finish with the tables.
LOCK_WAIT = 600.0


def _no_culprit(loc: Mapping) -> str | None:
    """The summary's ``culprit`` cell of a localisation without one: ``none`` when every
    quantity agreed, ``(skipped)`` or ``(not localised)`` otherwise, empty without one."""
    if not loc:
        return None
    return "none" if loc.get("status") == "localised" else f"({loc.get('status')})"


#: Diagnosis results copied into summary.csv.
DIAGNOSIS_SUMMARY = (
    "fp64_rule_verdict",
    "tol_exceeded_step",
    "tol_exceeded_where",
    "f64_divergence_step",
    "f64_divergence_where",
    "relu_flip_step",
    "relu_flip_unit",
    "relu_flip_counts",
    "signed_agreement_until",
    "worst_ulp",
    "fp64_worst_ratio",
)

SUMMARY_COLUMNS = (
    "experiment",
    "comparison",
    "device",
    "pair",
    "step0_identical",
    "bitwise_identical",
    "status",
    "worst_dparam",
    "worst_step",
    "worst_where",
    "final_dparam",
    "worst_dloss",
    "torch_f64",
    "candle_f64",
    "f64_f64",
    "tolerance",
    "verdict",
    "expected_verdict",
    *DIAGNOSIS_SUMMARY,
    "culprit",
    "culprit_phase",
    "never_updated",
    "reference_host",
    "candidate_host",
    "reference_version",
    "candidate_version",
)


def _verdict_and_status(perstep: Mapping, split: Mapping) -> tuple[str, str]:
    """A summary row's verdict and status: the per-step result's, but ``framework-error``
    with each failed run named (run, step, the framework's message) where a run of the
    comparison failed, a float64 run of its split too."""
    verdict, status = perstep["verdict"], perstep["status"]
    said = {f["message"] for f in perstep.get("failed_runs") or []}
    more = [f["message"] for f in split.get("failed_runs") or [] if f["message"] not in said]
    if more:
        status = "; ".join([*([status] if status != "ok" else []), *more])
    if said or more:
        verdict = verdicts.FRAMEWORK_ERROR
    return verdict, status


def summary_rows(
    results: Mapping[str, Mapping], unsupported: Sequence[Mapping], errors: Sequence[dict] = ()
) -> list[dict]:
    """The summary's rows from comparison results (path → result): one per comparison with
    a per-step result, joined with its split and diagnosis; then the rows of each
    cross-host result (kind ``crosshost``, ``crosshost.summary_rows``: device ``cpu@mac``),
    by host and experiment; then ``errors`` (verdict ``error``) and the ``unsupported``
    cells (``experiment``, ``device``, ``label``, ``reason``)."""
    by_kind: dict[str, dict] = {"perstep": {}, "split": {}, "diagnosis": {}, "localise": {}}
    across: dict[tuple[str, str], Mapping] = {}
    for r in results.values():
        if r["kind"] == "crosshost":
            across[(r["host"], r["experiment"])] = r
            continue
        by_kind[r["kind"]][(r["experiment"], r["comparison"], r["device"])] = r
    rows = []
    for key, r in sorted(by_kind["perstep"].items()):
        s = by_kind["split"].get(key, {}).get("worst", {})
        d = by_kind["diagnosis"].get(key, {})
        loc = by_kind["localise"].get(key, {})
        verdict, status = _verdict_and_status(r, by_kind["split"].get(key, {}))
        rows.append(
            {
                "experiment": r["experiment"],
                "comparison": r["comparison"],
                "device": r["device"],
                "pair": f"{r['reference']} vs {r['candidate']}",
                "step0_identical": r["step0_identical"],
                "bitwise_identical": r["bitwise_identical"],
                "status": status,
                "worst_dparam": r["worst_dparam"],
                "worst_step": r["worst_step"],
                "worst_where": r["worst_where"],
                "final_dparam": r["final_dparam"],
                "worst_dloss": r["worst_dloss"],
                "torch_f64": s.get("torch_f64"),
                "candle_f64": s.get("candle_f64"),
                "f64_f64": s.get("f64_f64"),
                "tolerance": r["tolerance"],
                "verdict": verdict,
                "expected_verdict": verdicts.EXPECTATIONS[r["expect"]],
                **{c: d.get(c) for c in DIAGNOSIS_SUMMARY},
                # computed once, by the per-step job
                "tol_exceeded_step": r["tol_exceeded_step"],
                "tol_exceeded_where": r["tol_exceeded_where"],
                # the localisation (parity.localise.replay): the first op that differs, or why none
                "culprit": loc.get("culprit") or _no_culprit(loc),
                "culprit_phase": loc.get("culprit_phase"),
                # parameters one side never updated (compare.never_updated)
                "never_updated": "; ".join(r.get("never_updated") or []),
                "reference_host": r["reference_provenance"]["host"],
                "candidate_host": r["candidate_provenance"]["host"],
                "reference_version": r["reference_provenance"]["framework_version"],
                "candidate_version": r["candidate_provenance"]["framework_version"],
            }
        )
    for key in sorted(across):
        rows += [
            {**dict.fromkeys(SUMMARY_COLUMNS), **row} for row in crosshost.summary_rows(across[key])
        ]
    for e in errors:
        rows.append({**dict.fromkeys(SUMMARY_COLUMNS), **e, "verdict": verdicts.ERROR})
    for cell in unsupported:
        rows.append(
            {
                **dict.fromkeys(SUMMARY_COLUMNS),
                "experiment": cell["experiment"],
                "comparison": "-",
                "device": cell["device"],
                "pair": f"{cell['label']}: {cell['reason']}",
                "verdict": verdicts.UNSUPPORTED,
                "expected_verdict": verdicts.UNSUPPORTED,
            }
        )
    return rows


def _rounding_only(row: Mapping) -> bool:
    """Whether a comparison that failed its tolerance differs by rounding alone, as its
    float64 diagnosis judges it: the fp64-referenced rule never fails and the float64 runs
    never leave float64 rounding of each other. False without a diagnosis."""
    return (
        row.get("verdict") == verdicts.FAIL
        and row.get("fp64_rule_verdict") == verdicts.PASS
        and row.get("f64_divergence_step") is None
        and row.get("f64_f64") is not None
    )


def write_tables(
    rows: list[dict], out_csv: str, out_md: str, n_results: int, intro: str = ""
) -> dict:
    """Write summary.csv (``rows``, :data:`SUMMARY_COLUMNS`) and its Markdown twin, which
    lists the verdicts that differ from their expectation, names below the table the
    parameters each comparison's one run never updated, and says which run made it from
    ``n_results`` results (its record lists them); ``intro`` (Markdown) heads a partial
    summary. Returns what was written, kind (``csv``, ``md``, ``html``) → path."""
    tables.write_csv(out_csv, rows, SUMMARY_COLUMNS)
    fmt = {
        c: tables.sci
        for c in (
            "worst_dparam",
            "final_dparam",
            "worst_dloss",
            "torch_f64",
            "candle_f64",
            "f64_f64",
        )
    }
    md_cols = (
        "experiment",
        "comparison",
        "device",
        "pair",
        "status",
        "step0_identical",
        "worst_dparam",
        "worst_where",
        "f64_f64",
        "tolerance",
        "verdict",
        "expected_verdict",
        "culprit",
        "culprit_phase",
    )
    bad = [r for r in rows if not verdicts.meets_expectation(r["verdict"])]
    head = ("# Summary (partial)\n\n" if intro else "# Summary\n\n") + intro
    for r in bad:
        # the status of a remote host's error row holds the remote's own text (its error)
        named = md_text(f"{r['experiment']} {r['comparison']} {r['device']}: {r['verdict']}")
        head += f"- **{named}**"
        if r["verdict"] == verdicts.UNEXPECTED_PASS:
            head += " (a negative control passed: the harness no longer sees this fault)"
        if r["verdict"] in (verdicts.FRAMEWORK_ERROR, verdicts.ERROR):
            head += f" ({md_text(r['status'])})"
        if _rounding_only(r):
            head += (
                " (yet the float64 diagnosis finds rounding, not another formula: the "
                "fp64-referenced rule holds at every step and the float64 runs never leave "
                "float64 rounding; a parameter whose exact gradient is 0, such as a bias "
                "right before a normalisation under Adam, does this: "
                "docs/own-model.md#what-comes-out)"
            )
        head += "\n"
    if bad:
        head += "\n"
    # Parameters one run never updated (a gradient that never arrived), named: the table
    # shows them only as a large worst_dparam.
    stuck = [r for r in rows if r.get("never_updated")]
    tail = "".join(
        "\n- "
        + md_text(
            f"never updated in {r['experiment']} {r['comparison']} {r['device']}: "
            f"{r['never_updated']}"
        )
        for r in stuck
    )
    made = (
        ("\n" + tail.lstrip("\n") + "\n" if tail else "")
        + f"\nMade by run {integrity.run_id()} from {n_results} comparison results; "
        f"`{os.path.basename(_record_of(out_md))}` lists each with its sha256.\n"
    )
    tables.write_twins(out_md, head + tables.markdown_table(rows, md_cols, fmt) + made)
    return {"csv": out_csv, "md": out_md, "html": _html(out_md)}


def _record_of(md_path: str) -> str:
    return str(md_path).rsplit(".", 1)[0] + ".sources.json"


def _html(md_path: str) -> str:
    return str(md_path).rsplit(".", 1)[0] + ".html"


def summary(
    results: Sequence[str],
    unsupported: Sequence[Mapping],
    out_csv: str,
    out_md: str,
    out_record: str,
    code: str | None = None,
) -> list[dict]:
    """Gather per-comparison results into ``summary.csv``, its Markdown twin and its record.

    ``results`` are the comparison jobs' sealed JSON results (a corrupt one is refused,
    ``integrity.IntegrityError``); ``unsupported`` the cells the validity matrix excludes
    (``experiment``, ``device``, ``label``, ``reason``), each a row with verdict
    ``unsupported``. ``out_record`` (``summary.sources.json``) records the run, each
    result's sha256, the params and ``code`` hashes. Written under the tables' lock, which
    also removes the partial summary an earlier failed run left.
    """
    made_from, found = {}, {}
    for path in results:
        found[path], sha = integrity.read_sealed_json_digest(path)
        made_from[path] = {"path": str(path), "sha256": sha}
    rows = summary_rows(found, unsupported)
    with exclusive_lock(paths.TABLES_LOCK, LOCK_WAIT):
        written = write_tables(rows, out_csv, out_md, len(found))
        integrity.write_record(
            out_record,
            "summary",
            made_from,
            written,
            partial=False,
            params_sha256=canonical_hash(list(unsupported)),
            code=code,
        )
        remove_files(partial_paths(paths.SUMMARY_PARTIAL))
    return rows


def partial_paths(pattern: str) -> list[str]:
    """The files of a partial table (``summary.partial.*``, ``probes.partial.*``)."""
    return [pattern.format(ext=e) for e in ("csv", "md", "html", "sources.json")]


def table_paths(pattern: str, record: str) -> list[str]:
    """The files a table rule writes (csv, md, html) and its record."""
    return [pattern.format(ext=e) for e in ("csv", "md", "html")] + [record]


def remove_files(files: Sequence[str]) -> list[str]:
    """Remove those of ``files`` (paths) that exist; returns the ones removed."""
    gone = [f for f in files if os.path.exists(f)]
    for f in gone:
        os.unlink(f)
    return gone
