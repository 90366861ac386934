"""The ``check`` job: fail when any verdict, of a comparison or a probe, differs from its
expectation; and first, refuse every table a person reads that is not what the sealed
records that made it say, or whose records do not match the current config, code and plan.
``scripts/check.py`` is a thin adapter.

What is checked (:func:`problems`), each problem one line naming the file and why:

* ``summary.csv``, ``summary.md`` and ``summary.html`` against the sha256 its record
  (``summary.sources.json``) holds, the record against the current plan (the comparisons
  it was made from, the unsupported cells, the summary's code), and each result it was
  made from against its comparison's current job (``partial.current_result``: made under
  this config and by this code, from traces and a fixture that are as they were read);
* each comparison's own tables (per step, float64 split, diagnosis, localisation, a
  remote host's cross-host table: CSV, Markdown, HTML) against the sha256 its sealed
  result recorded when it wrote them;
* each comparison's figures (PNG, SVG) against the sha256 its sealed result recorded
  when the job that drew them wrote it (what was written, never a drawing made again:
  matplotlib's files are not byte-reproducible);
* with probes, ``probes.csv`` and its twins against ``probes.sources.json`` and the
  current probe plan (``probe.table.table_problems``);
* the provenance table, the framework table, the optimizer defaults, the release matrix
  and the training-loop page against their sealed records, and each record against the
  page's current spec: its params, code and inputs (``sealed.page_problems``).

The pages another target makes (the fuzz campaign's findings, summary, probe files and
reproductions: ``sealed.OTHER_PAGES``) are held to their record and the current config in
the same way, each problem logged as a warning naming the target that makes them again
(``sealed.other_page_warnings``), not refused: check's own target does not make them.

Files a person reads that no record covers are named too, never skipped in silence
(``sealed.unverified``: Snakemake's own report, a table of another target or config);
they are logged as warnings, not refused, since check cannot tell them current or not.

A run with ``--rerun-triggers mtime`` does not rerun a job whose params changed (a new
tolerance), so its old result, and the summary made of it, stay on disk: ``check`` names
each such verdict (``a3_sgd main cpu: … was made under another config (its verdict pass
was judged at tolerance 1e-06; the config now says 1e-09)``) rather than pass on it.
"""

from __future__ import annotations

import csv
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from parity.compare import verdicts
from parity.core import integrity, paths
from parity.plan.keys import Comparison
from parity.report import sealed
from parity.report.partial import current_result, summary_problems


class StaleTable(ValueError):
    """A table that is not what its records say, or not current; the message names each
    file and why, one line each."""


def check_record(table: str, record_path: str) -> None:
    """Refuse a table (``summary.csv``, ``probes.csv``) that is not what its record
    (``*.sources.json``) says, without a plan to hold it against: a file it wrote (CSV,
    Markdown, HTML) changed since, or an input it was made from (a result, and each
    result's traces and fixture) changed or is gone. Raises :class:`StaleTable` naming
    each file, or ``integrity.IntegrityError`` for a record that is not intact."""
    record = integrity.read_sealed_json(record_path)
    gone = integrity.altered(record["tables"], record_path)
    gone += integrity.changed(record["made_from"])
    for r in record["made_from"].values():
        if r["path"].endswith(".json") and os.path.exists(r["path"]):
            gone += integrity.changed(integrity.read_sealed_json(r["path"]).get("sources", {}))
    if gone:
        raise StaleTable(
            f"{table} is not current: {'; '.join(gone)}; rerun the workflow to make it again"
        )


def check_params(
    comparisons: Sequence[Mapping],
    unsupported: Sequence[Mapping],
    codes: Mapping[str, str | None],
    remote_jobs: Sequence[Mapping] = (),
    probes: Mapping | None = None,
    probe_hosts: Mapping[str, Sequence[str]] | None = None,
    pages: Sequence[Mapping] = (),
    other_pages: Sequence[Mapping] = (),
) -> dict[str, Any]:
    """What the check job holds the tables against, as plain data (its rule's params):
    every comparison's job (``Plan.comparison_job``), the unsupported cells, each job's
    code hash by table kind, the cross-host jobs (``partial.RemoteJobs``), the probe plan
    (``ProbePlan.to_params``, None without probes), the remote hosts' probe devices,
    each sealed page's spec (``sealed.page_spec``) and each spec of a page another target
    makes (``sealed.OTHER_PAGES``: the fuzz campaign's)."""
    return {
        "comparisons": list(comparisons),
        "unsupported": list(unsupported),
        "codes": dict(codes),
        "remote_jobs": list(remote_jobs),
        "probes": probes,
        "probe_hosts": dict(probe_hosts or {}),
        "pages": list(pages),
        "other_pages": list(other_pages),
    }


def _cell(c: Comparison, kind: str) -> str:
    return f"{c.experiment} {c.name} {c.device}" + ("" if kind == "perstep" else f" ({kind})")


def result_problems(params: Mapping[str, Any]) -> list[str]:
    """Each comparison's and cross-host job's result that is not current, and each table
    it wrote (CSV, Markdown, HTML) that is not what it recorded: one line each, naming the
    comparison and the file."""
    codes = params["codes"]
    out = []
    for job in params["comparisons"]:
        c = Comparison.from_params(job["comparison"])
        for kind in c.kinds:
            r, why = current_result(c.result(kind), job, codes.get(kind))
            if r is None:
                out.append(f"{_cell(c, kind)}: {why}")
            else:
                out += integrity.altered(r.get("tables", {}), c.result(kind))
    for j in params["remote_jobs"]:
        r, why = current_result(j["result"], j["job"], codes.get("crosshost"))
        if r is None:
            out.append(f"remote host {j['host']} {j['experiment']}: {why}")
        else:
            out += integrity.altered(r.get("tables", {}), j["result"])
    return out


def problems(
    params: Mapping[str, Any],
    summary_record: str = paths.SUMMARY_SOURCES,
    probes_record: str | None = paths.PROBES_SOURCES,
) -> list[str]:
    """Every way the tables a person reads are not what the sealed records that made them
    say, or those records not what the current config, code and plan make (``params``:
    :func:`check_params`); see the module docstring. Empty when everything is current."""
    comparisons = [(Comparison.from_params(j["comparison"]), j) for j in params["comparisons"]]
    out = summary_problems(
        comparisons,
        params["unsupported"],
        params["codes"],
        summary_record,
        params["remote_jobs"],
    )
    # a result that is not current is said once, with the comparison whose verdict it holds
    results = result_problems(params)
    out = [p for p in out if not any(p in r for r in results)] + results
    if params.get("probes") is not None and probes_record is not None:
        from parity.probe.plan import ProbePlan
        from parity.probe.table import table_problems

        plan = ProbePlan.from_params(params["probes"])
        code = params["codes"].get("probes_table")
        out += table_problems(plan, code, probes_record, params.get("probe_hosts"))
    for spec in params.get("pages", ()):
        out += sealed.page_problems(spec)
    return out


def records(
    params: Mapping[str, Any],
    summary_record: str = paths.SUMMARY_SOURCES,
    probes_record: str | None = paths.PROBES_SOURCES,
) -> list[str]:
    """Every sealed result and record ``check`` holds files to under ``params``
    (:func:`check_params`): each comparison's results, the cross-host results, the
    summary's and probe table's records and each page's."""
    out = [summary_record]
    for job in params["comparisons"]:
        c = Comparison.from_params(job["comparison"])
        out += [c.result(kind) for kind in c.kinds]
    out += [j["result"] for j in params["remote_jobs"]]
    if params.get("probes") is not None and probes_record is not None:
        out.append(probes_record)
    out += [spec["record"] for spec in params.get("pages", ())]
    out += [spec["record"] for spec in params.get("other_pages", ())]
    return out


def check(
    summary_csv: str,
    log: logging.Logger,
    probes_csv: str | None = None,
    summary_record: str = paths.SUMMARY_SOURCES,
    probes_record: str = paths.PROBES_SOURCES,
    params: Mapping[str, Any] | None = None,
    say: Callable[[str], None] | None = None,
) -> list[dict]:
    """Rows of ``summary.csv`` (and ``probes.csv``) whose verdict does not meet its
    expectation, each logged with what it means. First every table is held against its
    records and, given ``params`` (:func:`check_params`, what the rule resolved), those
    records against the current config, code and plan (:func:`problems`): a table that is
    not current or not as written is refused, never judged (:class:`StaleTable`, every
    problem named, one per line); a file a person reads that no record covers is logged
    as a warning naming it (``sealed.unverified``), and given to ``say`` (the job's
    console) when given."""
    if params is not None:
        probes_record_now = probes_record if probes_csv else None
        found = problems(params, summary_record, probes_record_now)
        covered = sealed.recorded_files(records(params, summary_record, probes_record_now))
        warnings = [
            w for spec in params.get("other_pages", ()) for w in sealed.other_page_warnings(spec)
        ]
        for line in warnings + sealed.unverified(covered):
            log.warning("%s", line)
            if say is not None:
                say(f"check: {line}")
        if found:
            for p in found:
                log.error("%s", p)
            raise StaleTable(
                "the tables are not what their records say, or not current "
                f"({len(found)} problems); rerun the workflow:\n  " + "\n  ".join(found)
            )
    check_record(summary_csv, summary_record)
    with open(summary_csv, encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    bad = [r for r in rows if not verdicts.meets_expectation(r["verdict"])]
    for r in bad:
        msg = f"{r['experiment']} {r['comparison']} {r['device']}: {r['verdict']}"
        if r["verdict"] == verdicts.UNEXPECTED_PASS:
            msg += " -- a negative control passed: the harness can no longer see this fault"
        if r["verdict"] in (verdicts.ERROR, verdicts.FRAMEWORK_ERROR):
            msg += f" ({r['status']})"
        log.error(msg)
    log.info("%d comparisons, %d differ from their expectation", len(rows), len(bad))
    if probes_csv is not None:
        check_record(probes_csv, probes_record)
        with open(probes_csv, encoding="utf-8") as f:
            probe_rows = list(csv.DictReader(f))
        probe_bad = [r for r in probe_rows if not verdicts.meets_expectation(r["verdict"])]
        for r in probe_bad:
            msg = (
                f"probe {r['probe']} {r['case']} {r['quantity']} "
                f"{' '.join(filter(None, [r['framework'], r.get('version')]))} "
                f"{r['device']} {r['dtype']}: {r['verdict']}"
            )
            if r["verdict"] == verdicts.KNOWN_BUG_FIXED:
                msg += (
                    " -- the recorded known bug is gone: update the probe file (its known_bug"
                    " versions name the releases that have it)"
                )
            log.error(msg)
        log.info("%d probe rows, %d differ from their expectation", len(probe_rows), len(probe_bad))
        bad += probe_bad
    return bad
