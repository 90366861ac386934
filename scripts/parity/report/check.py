"""The ``check`` job: fail when any verdict, of a comparison or a probe, differs from its
expectation; a table that is no longer what its record says it was made from is refused,
never judged. ``scripts/check.py`` is a thin adapter.
"""

from __future__ import annotations

import csv
import logging
import os

from parity.compare import verdicts
from parity.core import integrity, paths


class StaleTable(ValueError):
    """A table that is no longer what its record says it was made from."""


def check_record(table: str, record_path: str) -> None:
    """Refuse a table (``summary.csv``, ``probes.csv``) that is not what its record
    (``*.sources.json``) says: the table changed since it was written, or an input it was
    made from (a result, and each result's traces and fixture) changed or is gone. Raises
    :class:`StaleTable` or ``integrity.IntegrityError`` naming the file."""
    record = integrity.read_sealed_json(record_path)
    integrity.check_file(table, record["tables"]["csv"]["sha256"], record_path)
    gone = integrity.changed(record["made_from"])
    for r in record["made_from"].values():
        if r["path"].endswith(".json") and os.path.exists(r["path"]):
            gone += integrity.changed(integrity.read_sealed_json(r["path"]).get("sources", {}))
    if gone:
        raise StaleTable(
            f"{table} is not current: {'; '.join(gone)}; rerun the workflow to make it again"
        )


def check(
    summary_csv: str,
    log: logging.Logger,
    probes_csv: str | None = None,
    summary_record: str = paths.SUMMARY_SOURCES,
    probes_record: str = paths.PROBES_SOURCES,
) -> list[dict]:
    """Rows of ``summary.csv`` (and ``probes.csv``) whose verdict does not meet its
    expectation, each logged with what it means. Each table is first checked against its
    record (:func:`check_record`): a stale or altered table is refused, never judged."""
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
