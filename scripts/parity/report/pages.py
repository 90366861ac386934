"""Report pages built from the traces and tables: the provenance of every trace and the
training-loop page of the Snakemake report."""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping, Sequence
from typing import Any

from parity.core.fileio import write_text_atomic
from parity.render import tables
from parity.render.markdown import md_text
from parity.trace.reader import TraceReader
from parity.train import optimizer_defaults

PROVENANCE_COLUMNS = (
    "experiment",
    "run",
    "dtype",
    "device",
    "framework",
    "framework_version",
    "compiler",
    "python",
    "host",
    "cpu",
    "platform",
    "threads",
    "device_detail",
    "features",
    "optimizer_impl",
    "optimizer_path",
    "status",
    "fixture_sha256",
    "config_hash",
    "schema_version",
    "trace",
)


def provenance(
    traces: Sequence[str], out_csv: str, out_md: str, limits: Mapping[str, Any] | None = None
) -> list[dict]:
    """Where and how every trace was made, read from the traces themselves (so traces
    imported from another host show that host), each within the config's ``limits``
    (``parity.plan.limits.settings``; default its defaults), the ones the plan held the
    runs to."""
    rows = []
    for path in traces:
        m = TraceReader(path, limits=limits).meta
        runner = m["runner"]
        rows.append(
            {
                **{k: m[k] for k in ("experiment", "run", "dtype", "device", "framework")},
                "framework_version": m["framework_version"],
                "compiler": runner.get("compiler", ""),
                "python": runner.get("python", ""),
                "host": m["host"],
                "cpu": runner.get("cpu", ""),
                "platform": runner.get("platform", ""),
                "threads": runner.get("threads", ""),
                "device_detail": runner.get("device_detail", ""),
                "features": runner.get("features", ""),
                "optimizer_impl": runner.get("optimizer_impl", ""),
                "optimizer_path": runner.get("optimizer_path", ""),
                "status": m["status"],
                "fixture_sha256": m["fixture_sha256"],
                "config_hash": m["config_hash"],
                "schema_version": m["schema_version"],
                "trace": path,
            }
        )
    tables.write_csv(out_csv, rows, PROVENANCE_COLUMNS)
    short = [{**r, "fixture_sha256": r["fixture_sha256"][:12]} for r in rows]
    md_cols = (
        "experiment",
        "run",
        "dtype",
        "device",
        "framework_version",
        "compiler",
        "python",
        "host",
        "cpu",
        "threads",
        "optimizer_impl",
        "optimizer_path",
        "status",
        "fixture_sha256",
    )
    tables.write_twins(
        out_md,
        "# Provenance of every trace\n\n"
        f"- fixtures (sha256): {len({r['fixture_sha256'] for r in rows})} distinct\n"
        # a trace's host is the text its maker recorded (a remote host's, for its traces)
        f"- hosts: {md_text(', '.join(sorted({r['host'] for r in rows})))}\n\n"
        + tables.markdown_table(short, md_cols),
    )
    return rows


def training_loop_page(rst_path: str, defaults_json: Sequence[str], out_html: str) -> None:
    """The report's training-loop page: our text (``report/training_loop.rst``) followed by
    the optimizer defaults every framework printed (its sealed JSON, ``optimizer_defaults.read``, as
    the optimizer-defaults table shows them), rendered to HTML with docutils."""
    from docutils.core import publish_string

    with open(rst_path, encoding="utf-8") as f:
        text = f.read()
    # The cells exactly as the optimizer-defaults table writes them.
    table = tables.csv_text(optimizer_defaults.read(defaults_json), optimizer_defaults.COLUMNS)
    rows = list(csv.DictReader(io.StringIO(table)))
    cols = ("framework", "version", "optimizer", "lr", "betas", "eps", "weight_decay", "momentum")

    def cell(v: str) -> str:
        return f"``{v}``" if v else "—"

    lines = [".. list-table::", "   :header-rows: 1", ""]
    lines.append("   * - " + "\n     - ".join(cols))
    for r in rows:
        lines.append("   * - " + "\n     - ".join(cell(r[c]) for c in cols))
    page = publish_string(
        text + "\n".join(lines) + "\n",
        writer_name="html5",
        settings_overrides={"report_level": 2, "halt_level": 2, "output_encoding": "unicode"},
    )
    write_text_atomic(out_html, page)
