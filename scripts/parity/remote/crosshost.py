"""The comparison across hosts: a remote host's traces (``parity.remote.fetch``), brought back
into ``results/remote/{host}/``, held against this host's, per experiment.

Two kinds of row in ``results/tables/{experiment}/crosshost-{host}.csv``:

* ``same run``: one run × dtype made there (device ``cpu@mac``) against the same run made
  here (``cpu``; a device this host lacks, Metal, against the reference device): the
  worst max|dparam| over the steps, whether the two are identical bit for bit, and each
  side's host, CPU and framework version, and a verdict against the config's
  ``tolerance`` (expected: ``pass``). Two CPUs running the same code agree bit for bit
  unless their libraries take different paths (SIMD width, BLAS, fused multiply-add).
* ``comparison``: each comparison of the experiment on the remote device, computed here
  from the remote's traces only (both runs ``…@mac``), with its verdict against the
  tolerance, as the local tables compute it for this host.

Each remote trace is read only when its sha256 is the one the manifest recorded, through
the trace reader (sealed metadata, page checksums, what the run must carry).

Besides the table, the job writes a sealed result
(``results/compare/{experiment}/crosshost-{host}.json``: the rows, the sha256 of the
manifest and of every trace read, the params and code hashes), which the summary gathers
like a comparison result: :func:`summary_rows` turns its rows into summary rows (device
``cpu@mac``), and :func:`expected_cells` names the rows a host owes the summary when it
has no current result (a failed host, a failed job).
"""

from __future__ import annotations

import csv
import json
import logging
import math
from collections.abc import Mapping
from pathlib import Path

from parity.compare import judgement, verdicts
from parity.compare import maths as compare
from parity.compare.job import job_stamp
from parity.core import integrity, paths
from parity.core.fileio import atomic_path, sha256_file
from parity.core.hosts import device_label, here_device, host_runs, remote_file
from parity.plan.keys import RunKey
from parity.render.markdown import md_text
from parity.trace.reader import TraceReader

COLUMNS = [
    "experiment",
    "kind",
    "name",
    "dtype",
    "device",
    "reference",
    "candidate",
    "worst_dparam",
    "worst_step",
    "bitwise_identical",
    "tolerance",
    "verdict",
    "expected_verdict",
    "reference_host",
    "candidate_host",
    "reference_cpu",
    "candidate_cpu",
    "reference_version",
    "candidate_version",
    "failed",
]


#: The two kinds of row (column ``kind``).
SAME_RUN, COMPARISON = "same run", "comparison"


def _side(key: RunKey, path: str, label: str, expect: Mapping) -> dict:
    return {"path": path, "label": label, "expect": dict(expect)}


def crosshost_params(plan, host: str, devices, experiment: str) -> dict:
    """What the cross-host job of ``experiment`` and ``host`` reads, as plain data: the
    ``same run`` pairs (here, there; each held to the config's ``tolerance``, expected to
    pass) and the experiment's comparisons on the remote's devices, each side's path,
    label and expectation, and the device label (``cpu@mac``) of the summary row."""
    there_keys = [k for k in host_runs(plan, devices) if k.experiment == experiment]
    same = []
    for k in there_keys:
        here = RunKey(k.experiment, k.run, k.dtype, here_device(plan, k.device))
        if not plan.supported(here):
            continue
        same.append(
            {
                "name": k.run,
                "dtype": k.dtype,
                "device": device_label(k.device, host),
                "expect": "pass",
                "tolerance": plan.tolerance,
                "reference": _side(here, here.trace, here.label, plan.trace_expectation(here)),
                "candidate": _side(
                    k,
                    remote_file(host, k.trace),
                    f"{k.run} {k.dtype} {device_label(k.device, host)}",
                    plan.trace_expectation(k),
                ),
            }
        )
    comparisons = []
    for c in plan.comparisons(list(devices)):
        if c.experiment != experiment:
            continue
        sides = {}
        for role, key in (("reference", c.reference), ("candidate", c.candidate)):
            sides[role] = _side(
                key,
                remote_file(host, key.trace),
                f"{key.run} {key.dtype} {device_label(key.device, host)}",
                plan.trace_expectation(key),
            )
        comparisons.append(
            {
                "name": c.name,
                "dtype": c.reference.dtype,
                "device": device_label(c.device, host),
                "expect": c.expect,
                "tolerance": c.tolerance,
                **sides,
            }
        )
    return {"experiment": experiment, "host": host, "same": same, "comparisons": comparisons}


def here_traces(params: Mapping) -> list[str]:
    """The traces of this host the job reads (its inputs besides the manifest)."""
    return sorted({p["reference"]["path"] for p in params["same"]})


def _open(side: Mapping, files: Mapping[str, str]) -> TraceReader:
    path = side["path"]
    if path.startswith("results/remote/"):
        want = files.get(path)
        if want is None:
            raise ValueError(f"{path} is not in the host's manifest: it did not come back")
        got = sha256_file(path)
        if got != want:
            raise ValueError(
                f"{path}: sha256 {got[:12]}… differs from the manifest's {want[:12]}…; "
                "rerun the remote target"
            )
    return TraceReader(path, expect=side["expect"])


def _row(experiment, kind, pair, ref: TraceReader, cand: TraceReader) -> dict:
    result = compare.perstep(ref, cand)
    worst, step = compare.worst(result.rows, "max_dparam")
    where = next((r["where"] for r in result.rows if r["step"] == step), "")
    tol = float(pair["tolerance"])
    failed = compare.failures([ref, cand])
    judged = (
        judgement.judge_failed_runs(failed, tol)
        if failed
        else judgement.judge_worst(worst, where, tol, pair["expect"])
    )
    return {
        "experiment": experiment,
        "kind": kind,
        "name": pair["name"],
        "dtype": pair["dtype"],
        "device": pair["device"],
        "reference": pair["reference"]["label"],
        "candidate": pair["candidate"]["label"],
        "worst_dparam": worst,
        "worst_step": step,
        "bitwise_identical": result.bitwise_identical,
        "tolerance": tol,
        "verdict": judged.verdict,
        "failed": judged.message if failed else "",
        "expected_verdict": verdicts.EXPECTATIONS[pair["expect"]],
        "reference_host": ref.meta["host"],
        "candidate_host": cand.meta["host"],
        "reference_cpu": ref.meta["runner"].get("cpu", ""),
        "candidate_cpu": cand.meta["runner"].get("cpu", ""),
        "reference_version": ref.meta["framework_version"],
        "candidate_version": cand.meta["framework_version"],
    }


def rows(params: Mapping, manifest: Mapping) -> list[dict]:
    """Every row of the table (see the module docstring)."""
    files = manifest["files"]
    e = params["experiment"]
    out = []
    for kind, pairs in ((SAME_RUN, params["same"]), (COMPARISON, params["comparisons"])):
        for pair in pairs:
            ref, cand = _open(pair["reference"], files), _open(pair["candidate"], files)
            out.append(_row(e, kind, pair, ref, cand))
    return out


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.3g}" if v == v else "nan"
    return str(v)


def markdown(table: list[dict], manifest: Mapping) -> str:
    """The table as Markdown, headed by where the remote's results came from. What the
    remote reported (its host name, system, CPU, checkout path) and every cell is text,
    escaped with ``markdown.md_text``: a description holding a newline, ``|``, a backtick or
    ``<script>`` reads as itself and leaves the table whole."""
    remote = manifest.get("remote", {})
    said = (md_text(remote.get(k) or "?") for k in ("hostname", "system", "cpu"))
    lines = [
        (
            f"Remote host {md_text(manifest['host'])} ({', '.join(said)}), checkout "
            f"{md_text(manifest['path'])} at commit {md_text(str(manifest['commit'])[:12])}."
        ),
        "",
        (
            "| kind | name | dtype | reference | candidate | worst max\\|dparam\\| | step | "
            "identical | verdict |"
        ),
        "|---|---|---|---|---|---:|---:|---|---|",
    ]
    for r in table:
        lines.append(
            "| "
            + " | ".join(
                md_text(_fmt(r[c]), cell=True)
                for c in (
                    "kind",
                    "name",
                    "dtype",
                    "reference",
                    "candidate",
                    "worst_dparam",
                    "worst_step",
                    "bitwise_identical",
                    "verdict",
                )
            )
            + " |"
        )
    return "\n".join(lines) + "\n"


def crosshost(
    params: Mapping,
    manifest_path: str,
    out_csv: str,
    out_md: str,
    log: logging.Logger,
    out_result: str | None = None,
    code: str | None = None,
) -> list[dict]:
    """Write the cross-host table of one experiment and host (CSV at full precision, and
    Markdown) and, with ``out_result``, its sealed result for the summary: the rows, the
    sha256 of the manifest and of every trace read (``sources``), of the tables written,
    and the hashes of ``params`` and ``code`` (``compare_jobs.job_stamp``). Raises
    ``ValueError`` for a remote trace that is not the manifest's, ``schema.TraceError`` for
    a trace that is not what its run must be."""
    made_from = {manifest_path: integrity.file_record(manifest_path)}
    manifest = json.loads(Path(manifest_path).read_text(encoding="utf-8"))
    for pair in [*params["same"], *params["comparisons"]]:
        for role in ("reference", "candidate"):
            path = pair[role]["path"]
            made_from.setdefault(path, integrity.file_record(path))
    table = rows(params, manifest)
    with atomic_path(out_csv) as tmp, open(tmp, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, COLUMNS, lineterminator="\n")
        w.writeheader()
        for r in table:
            w.writerow({k: repr(v) if isinstance(v, float) else v for k, v in r.items()})
    with atomic_path(out_md) as tmp:
        tmp.write_text(markdown(table, manifest), encoding="utf-8")
    if out_result is not None:
        integrity.write_sealed_json(
            out_result,
            {
                "kind": "crosshost",
                "experiment": params["experiment"],
                "host": params["host"],
                "rows": [{k: _json_value(v) for k, v in r.items()} for r in table],
                "sources": made_from,
                "tables": {
                    "csv": integrity.file_record(out_csv),
                    "md": integrity.file_record(out_md),
                },
                **job_stamp(params, code),
            },
        )
    log.info("%s vs %s: %d rows", params["experiment"], params["host"], len(table))
    return table


def _json_value(v):
    """``v`` for a JSON result: JSON has neither NaN nor Infinity, so a non-finite
    difference (a run that diverged) is stored as null; its verdict is already made."""
    return None if isinstance(v, float) and not math.isfinite(v) else v


# ----- the summary's rows -------------------------------------------------------------------


def summary_comparison(kind: str, name: str, dtype: str) -> str:
    """The summary's ``comparison`` cell of a cross-host row: the comparison's name
    (``main``) for kind ``comparison``; ``same run torch f32`` for kind ``same run``, so
    that (experiment, comparison, device) names one row."""
    return f"{SAME_RUN} {name} {dtype}" if kind == SAME_RUN else name


def summary_rows(result: Mapping) -> list[dict]:
    """The summary rows of a cross-host result (what :func:`crosshost` sealed): one per
    row of the table, device the remote's label (``cpu@mac``), pair ``reference vs
    candidate``, the worst max|dparam| over the steps and its step, the tolerance, the
    verdict and the expected verdict, hosts and versions; ``status`` names the table. The
    summary's other columns (split, diagnosis, culprit) are not computed across hosts and
    stay empty."""
    table = paths.CROSSHOST_TABLE.format(
        experiment=result["experiment"], host=result["host"], ext="csv"
    )
    out = []
    for r in result["rows"]:
        worst = r["worst_dparam"]
        out.append(
            {
                "experiment": r["experiment"],
                "comparison": summary_comparison(r["kind"], r["name"], r["dtype"]),
                "device": r["device"],
                "pair": f"{r['reference']} vs {r['candidate']}",
                "bitwise_identical": r["bitwise_identical"],
                "status": "; ".join(filter(None, [r.get("failed"), f"across hosts ({table})"])),
                "worst_dparam": math.inf if worst is None else worst,
                "worst_step": r["worst_step"],
                "tolerance": r["tolerance"],
                "verdict": r["verdict"],
                "expected_verdict": r["expected_verdict"],
                "reference_host": r["reference_host"],
                "candidate_host": r["candidate_host"],
                "reference_version": r["reference_version"],
                "candidate_version": r["candidate_version"],
            }
        )
    return out


def expected_cells(params: Mapping) -> list[dict]:
    """The summary rows a host owes for one experiment (``params``: :func:`crosshost_params`),
    without their values: experiment, comparison, device, pair, tolerance and expected
    verdict. The partial summary makes each an ``error`` row when the host's result is
    missing."""
    out = []
    for kind, pairs in ((SAME_RUN, params["same"]), (COMPARISON, params["comparisons"])):
        for p in pairs:
            out.append(
                {
                    "experiment": params["experiment"],
                    "comparison": summary_comparison(kind, p["name"], p["dtype"]),
                    "device": p["device"],
                    "pair": f"{p['reference']['label']} vs {p['candidate']['label']}",
                    "tolerance": float(p["tolerance"]),
                    "expected_verdict": verdicts.EXPECTATIONS[p["expect"]],
                }
            )
    return out
