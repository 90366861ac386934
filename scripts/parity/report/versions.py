"""The release matrix (``results/tables/versions.csv``): which releases of a Rust framework
have each known fault.

Rows are the faults the project knows of, and any cell a release gets wrong:

- a probe case × framework × device × dtype whose probe file records a ``known_bug`` for
  that framework there (``probes.py``: a device or ``device-dtype`` entry), and any other
  probe case a release fails (``new failure``);
- a comparison of an experiment, PyTorch against a Rust framework, that the config expects
  to fail (``expect: fail``), and any other comparison a release fails.

Columns are the framework's releases (config ``candle.versions``, ``burn.versions``;
``parity.plan.versions``), the primary one first. A release's cell reads its own rows of the
probe table (``probes.csv``, column ``version``) or its own comparison in the summary (the
primary release's comparison by its name, a further release's by the name with the
release's suffix, ``main_v0_11_1``; ``versions.add_release_runs``):

| cell          | probe case (every quantity of the case)       | comparison                     |
| ------------- | --------------------------------------------- | ------------------------------ |
| `reproduced`  | some quantity is `known-bug`                  | fails where a failure is known |
| `fixed`       | `known-bug-fixed`, or passes where a bug is   | passes where a failure is      |
|               | known                                         | known                          |
| `new failure` | some quantity fails (`fail`, `non-finite`, …) | fails where a pass is expected |
| `pass`        | every quantity passes (no bug known there)    | passes as expected             |
| `unsupported` | the release cannot run the case there         | the run cannot run there       |
| `missing`     | no current result (`error`: a job failed)     | no current result              |

Each cell has a detail column beside it: the values of the quantities it is about (a
fixed bug's values, which now equal the reference's), or the failing verdict and its note.
"""

from __future__ import annotations

import csv
import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from parity.compare import verdicts
from parity.plan import versions
from parity.render import tables
from parity.render.markdown import md_text

REPRODUCED = "reproduced"
FIXED = "fixed"
NEW_FAILURE = "new failure"
PASS = "pass"
UNSUPPORTED = "unsupported"
MISSING = "missing"
CELLS = (REPRODUCED, FIXED, NEW_FAILURE, PASS, UNSUPPORTED, MISSING)

#: Probe verdicts that are a failure of the framework (not of a job).
PROBE_FAILURES = frozenset(
    {verdicts.FAIL, verdicts.NON_FINITE, verdicts.FRAMEWORK_ERROR, verdicts.MISSING_GRADIENT}
)
#: Row keys before the release columns.
KEY_COLUMNS = ("kind", "subject", "framework", "device", "dtype", "known")
#: Values a cell's detail shows before eliding the rest.
DETAIL_VALUES = 8


def release_columns(releases: Mapping[str, Sequence[str]]) -> list[tuple[str, str]]:
    """(framework, version) of every release column, in config order."""
    return [(fw, v) for fw, vs in releases.items() for v in vs]


def column(framework: str, version: str) -> str:
    """A release's cell column: ``candle 0.11.1``, ``burn 0.22.1 flex`` (``versions.display``);
    its detail column adds `` detail``."""
    return f"{framework} {versions.display(framework, version)}"


def columns(releases: Mapping[str, Sequence[str]]) -> list[str]:
    """Every CSV column: the row keys, then per release its cell and its detail."""
    out = list(KEY_COLUMNS)
    for fw, v in release_columns(releases):
        out += [column(fw, v), column(fw, v) + " detail"]
    return out


# ----- what the job is given -------------------------------------------------------------


def plan_params(plan, probe_plan) -> dict[str, Any]:
    """The versions_table job's params: ``releases`` (framework → releases, the primary first),
    ``comparisons`` (each PyTorch-against-Rust comparison of the primary release: its
    experiment, name, device, framework, ``expect`` and ``cells``, release → the
    comparison's name for that release) and ``known_bugs`` (probe → case → framework →
    {``where``: each device and ``device-dtype`` entry → the quantities it records,
    ``versions``: the releases named, or None}). ``plan`` is a ``parity.plan.plan.Plan``,
    ``probe_plan`` a ``ProbePlan`` (None without probes)."""
    releases = versions.configured(plan.config)
    by_name = {(c.experiment, c.name, c.device): c for c in plan.comparisons()}
    comps = []
    for c in plan.comparisons():
        fws = {c.reference.framework, c.candidate.framework}
        rust = sorted(fws & set(releases))
        if "torch" not in fws or len(rust) != 1:
            continue
        fw = rust[0]
        side = c.candidate if c.candidate.framework == fw else c.reference
        if plan.run_settings(c.experiment, side.run).get("version") != releases[fw][0]:
            continue
        cells = {releases[fw][0]: c.name}
        for v in releases[fw][1:]:
            twin = c.name + versions.suffix(v)
            if (c.experiment, twin, c.device) in by_name:
                cells[v] = twin
        comps.append(
            {
                "experiment": c.experiment,
                "comparison": c.name,
                "device": c.device,
                "framework": fw,
                "expect": c.expect,
                "cells": cells,
            }
        )
    bugs: dict[str, dict] = {}
    for name, probe in probe_plan.probes.items() if probe_plan is not None else ():
        for case in probe.cases:
            for fw, entries in case.get("known_bug", {}).items():
                if fw not in releases:
                    continue
                bugs.setdefault(name, {}).setdefault(case["name"], {})[fw] = {
                    "where": {entry: sorted(qs) for entry, qs in sorted(entries.items())},
                    "versions": case.get("known_bug_versions", {}).get(fw),
                }
    return {"releases": releases, "comparisons": comps, "known_bugs": bugs}


# ----- cells -----------------------------------------------------------------------------


def probe_cell(rows: Sequence[Mapping], known: Iterable[str] = ()) -> str:
    """The cell of one release from its probe-table rows of one case (every quantity);
    ``known``: the quantities a bug is recorded for there. "" when the release has no rows;
    ``unsupported`` when every quantity is, or every quantity the bug records is (a bug
    that cannot be run is neither reproduced nor fixed)."""
    got = [r["verdict"] for r in rows]
    known = set(known)
    if not got:
        return ""
    if all(v == verdicts.UNSUPPORTED for v in got) or (
        known and all(r["verdict"] == verdicts.UNSUPPORTED for r in rows if r["quantity"] in known)
    ):
        return UNSUPPORTED
    if any(v in PROBE_FAILURES for v in got):
        return NEW_FAILURE
    if any(v == verdicts.ERROR for v in got):
        return MISSING
    if verdicts.KNOWN_BUG in got:
        return REPRODUCED
    if verdicts.KNOWN_BUG_FIXED in got or known:
        return FIXED
    return PASS


def comparison_cell(verdict: str | None, expect: str) -> str:
    """The cell of one release from its comparison's summary verdict (None: no row);
    ``expect`` the primary comparison's expectation (``pass`` or ``fail``)."""
    if verdict is None:
        return ""
    if verdict == verdicts.UNSUPPORTED:
        return UNSUPPORTED
    if verdict == verdicts.ERROR:
        return MISSING
    failed = verdict in (verdicts.FAIL, verdicts.EXPECTED_FAIL)
    if expect == "fail":
        return REPRODUCED if failed else FIXED
    return NEW_FAILURE if failed else PASS


def _probe_detail(rows: Sequence[Mapping], cell: str, quantities: set[str]) -> str:
    """What a probe cell is about: the reason for ``unsupported``; the failing quantities
    with their verdict and note for ``new failure`` and ``missing``; for ``reproduced`` and
    ``fixed`` the values of the quantities the known bug records (``quantities``), with
    their verdict and difference from the reference; nothing for ``pass``."""
    if cell == UNSUPPORTED:
        notes = {r["note"] for r in rows if r["verdict"] == verdicts.UNSUPPORTED and r.get("note")}
        return "; ".join(sorted(notes))[:200]
    if cell in (NEW_FAILURE, MISSING):
        bad = PROBE_FAILURES if cell == NEW_FAILURE else {verdicts.ERROR}
        return "; ".join(
            f"{r['quantity']}: {r['verdict']}: {r.get('note', '')}".rstrip(": ")
            for r in rows
            if r["verdict"] in bad
        )
    if cell not in (REPRODUCED, FIXED):
        return ""
    return "; ".join(_quantity_detail(r) for r in rows if r["quantity"] in quantities)


def _quantity_detail(r: Mapping) -> str:
    """``w.grad = [220, …] (known-bug, max|Δ| vs exact 152)``; a quantity without values
    (an error, no gradient) gives its verdict and the framework's message."""
    if not r.get("values"):
        note = f" ({r['note']})" if r.get("note") else ""
        return f"{r['quantity']}: {r['verdict']}{note}"
    diff = f", max|Δ| vs {r['reference']} {_number(r['max_diff'])}" if r.get("max_diff") else ""
    return f"{r['quantity']} = {_elide(r['values'])} ({r['verdict']}{diff})"


def _elide(text: str) -> str:
    """A probe row's values (``[0.1, 5.599999904632568, …]``) in at most
    :data:`DETAIL_VALUES` numbers of 6 significant digits, the count of the rest."""
    items = [i for i in text.strip("[]").split(", ") if i]
    shown = [_number(i, 6) for i in items[:DETAIL_VALUES]]
    more = f", … ({len(items)} values)" if len(items) > DETAIL_VALUES else ""
    return "[" + ", ".join(shown) + more + "]"


def _known_quantities(bug: Mapping | None, device: str, dtype: str) -> set[str]:
    """The quantities a known bug records on ``device`` in ``dtype``: a quantity's
    ``device-dtype`` entry, else its device entry (as ``probe_results`` judges them); a
    remote host's device (``cpu@mac``) takes its device's entries."""
    if bug is None:
        return set()
    base = device.split("@", 1)[0]
    where = bug["where"]
    return set(where.get(base, ())) | set(where.get(f"{base}-{dtype}", ()))


def _known_text(bug: Mapping, framework: str) -> str:
    """What the probe file says of the bug's releases: the ones its ``versions`` list
    names, or that it names none (the schema's default: the bug is matched against every
    release, and each release's cell says whether that release reproduces it)."""
    if bug["versions"] is None:
        return "known bug (no release named)"
    return "known bug in " + ", ".join(versions.display(framework, v) for v in bug["versions"])


def matrix_rows(
    params: Mapping[str, Any],
    summary_rows: Sequence[Mapping],
    probe_rows: Sequence[Mapping],
) -> list[dict]:
    """The matrix's rows (:data:`KEY_COLUMNS`, then per release its cell and detail) from
    the summary's rows and the probe table's rows (as read from their CSVs; ``version``
    names a Rust framework's release), for the job's ``params`` (:func:`plan_params`)."""
    releases: Mapping[str, list[str]] = params["releases"]
    out = []
    groups: dict[tuple, dict[str, list[Mapping]]] = {}
    for r in probe_rows:
        fw = r["framework"]
        if fw not in releases or r.get("version") not in releases[fw]:
            continue
        key = (r["probe"], r["case"], fw, r["device"], r["dtype"])
        groups.setdefault(key, {}).setdefault(r["version"], []).append(r)
    bugs = params["known_bugs"]
    empty = {c: "" for c in columns(releases)[len(KEY_COLUMNS) :]}
    for (probe, case, fw, device, dtype), by_version in groups.items():
        bug = bugs.get(probe, {}).get(case, {}).get(fw)
        quantities = _known_quantities(bug, device, dtype)
        known = bool(quantities)
        row = {
            "kind": "probe",
            "subject": f"{probe}/{case}",
            "framework": fw,
            "device": device,
            "dtype": dtype,
            "known": _known_text(bug, fw) if known else "",
            **empty,
        }
        for v in releases[fw]:
            rows = by_version.get(v, [])
            cell = probe_cell(rows, quantities)
            row[column(fw, v)] = cell
            row[column(fw, v) + " detail"] = _probe_detail(rows, cell, quantities)
        cells = {row[column(fw, v)] for v in releases[fw]}
        if known or NEW_FAILURE in cells or len(cells) > 1:
            out.append(row)
    summary = {(r["experiment"], r["comparison"], r["device"]): r for r in summary_rows}
    for c in params["comparisons"]:
        fw = c["framework"]
        row = {
            "kind": "experiment",
            "subject": f"{c['experiment']}/{c['comparison']}",
            "framework": fw,
            "device": c["device"],
            "dtype": "",
            "known": "expected to fail" if c["expect"] == "fail" else "",
            **empty,
        }
        for v in releases[fw]:
            name = c["cells"].get(v)
            s = summary.get((c["experiment"], name, c["device"])) if name else None
            cell = comparison_cell(None if s is None else s["verdict"], c["expect"])
            row[column(fw, v)] = cell
            row[column(fw, v) + " detail"] = _comparison_detail(s, cell)
        cells = {row[column(fw, v)] for v in releases[fw]}
        if c["expect"] == "fail" or NEW_FAILURE in cells or len(cells) > 1:
            out.append(row)
    return out


def _number(text: str, digits: int = 3) -> str:
    """A number read from a table in ``digits`` significant digits (``0.0610``); other text
    as it is."""
    try:
        return f"{float(text):.{digits}g}"
    except ValueError:
        return text


def _comparison_detail(s: Mapping | None, cell: str) -> str:
    if s is None or cell == "":
        return ""
    if cell in (UNSUPPORTED, MISSING):
        return s.get("status") or ""
    text = f"{s['verdict']}: worst |Δparam| {_number(s.get('worst_dparam', ''))}"
    if s.get("worst_step"):
        text += f" at step {s['worst_step']}"
    return text + f" (tolerance {s.get('tolerance', '')})"


# ----- the job ---------------------------------------------------------------------------


def _read_csv(path: str | None) -> list[dict]:
    if not path:
        return []
    with open(path, encoding="utf-8", newline="") as f:
        return list(csv.DictReader(f))


def markdown(params: Mapping[str, Any], rows: Sequence[Mapping]) -> str:
    """The Markdown twin: one section per framework, its releases as columns."""
    releases: Mapping[str, list[str]] = params["releases"]
    parts = [
        "# Releases\n",
        (
            "Which releases have each known fault: probe cases whose probe file records a "
            "known bug, comparisons the config expects to fail, and any cell a release fails. "
            "`reproduced`: the fault is there; `fixed`: the values equal the reference; "
            "`new failure`: a release fails where no fault is known.\n"
        ),
    ]
    for fw, vs in releases.items():
        mine = [r for r in rows if r["framework"] == fw]
        parts.append(f"## {fw}\n")
        if not mine:
            parts.append("No known fault and no failure in any release.\n")
            continue
        header = [
            "kind",
            "subject",
            "device",
            "dtype",
            "known",
            *(versions.display(fw, v) for v in vs),
        ]
        # a cell's detail holds a framework's message or a remote host's error: text
        body = [
            [
                r["kind"],
                r["subject"],
                r["device"],
                r["dtype"],
                r["known"],
                *(
                    (f"**{md_text(r[column(fw, v)], cell=True)}**" if r[column(fw, v)] else "")
                    + (
                        f" — {md_text(r[column(fw, v) + ' detail'], cell=True)}"
                        if r[column(fw, v) + " detail"]
                        else ""
                    )
                    for v in vs
                ),
            ]
            for r in mine
        ]
        parts.append(
            tables.markdown_table(
                [dict(zip(header, b, strict=True)) for b in body], header, raw=header[5:]
            )
        )
    return "\n".join(parts)


def versions_table(
    params: Mapping[str, Any],
    summary_csv: str,
    probes_csv: str | None,
    out_csv: str,
    out_md: str,
    log: logging.Logger,
) -> list[dict]:
    """Write ``versions.csv`` and its Markdown (and HTML) twin from the summary and the
    probe table (None without probes); each file appears whole or not at all. Returns the
    rows."""
    rows = matrix_rows(params, _read_csv(summary_csv), _read_csv(probes_csv))
    tables.write_csv(out_csv, rows, columns(params["releases"]))
    tables.write_twins(out_md, markdown(params, rows))
    counts: dict[str, int] = {}
    for r in rows:
        for fw, v in release_columns(params["releases"]):
            if r["framework"] == fw and r[column(fw, v)]:
                counts[f"{fw} {v} {r[column(fw, v)]}"] = (
                    counts.get(f"{fw} {v} {r[column(fw, v)]}", 0) + 1
                )
    log.info("%d rows: %s", len(rows), counts)
    return rows
