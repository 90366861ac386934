"""The comparison across hosts: a remote host's traces (``parity.remote``), brought back
into ``results/remote/{host}/``, held against this host's, per experiment.

Two kinds of row in ``results/tables/{experiment}/crosshost-{host}.csv``:

* ``same run``: one run × dtype made there (device ``cpu@mac``) against the same run made
  here (``cpu``; a device this host lacks, Metal, against the reference device): the
  worst max|dparam| over the steps, whether the two are identical bit for bit, and each
  side's host, CPU and framework version. Two CPUs running the same code agree bit for bit
  unless their libraries take different paths (SIMD width, BLAS, fused multiply-add).
* ``comparison``: each comparison of the experiment on the remote device, computed here
  from the remote's traces only (both runs ``…@mac``), with its verdict against the
  tolerance, as the local tables compute it for this host.

Each remote trace is read only when its sha256 is the one the manifest recorded, through
the trace reader (sealed metadata, page checksums, what the run must carry).
"""

from __future__ import annotations

import csv
import json
import logging
from collections.abc import Mapping
from pathlib import Path

from . import compare, verdicts
from .fileio import atomic_path, sha256_file
from .keys import RunKey
from .remote import device_label, here_device, host_runs, remote_file
from .schema import TraceReader

COLUMNS = [
    "experiment",
    "kind",
    "name",
    "dtype",
    "reference",
    "candidate",
    "worst_dparam",
    "worst_step",
    "bitwise_identical",
    "tolerance",
    "verdict",
    "reference_host",
    "candidate_host",
    "reference_cpu",
    "candidate_cpu",
    "reference_version",
    "candidate_version",
]


def _side(key: RunKey, path: str, label: str, expect: Mapping) -> dict:
    return {"path": path, "label": label, "expect": dict(expect)}


def crosshost_params(plan, host: str, devices, experiment: str) -> dict:
    """What the cross-host job of ``experiment`` and ``host`` reads, as plain data: the
    ``same run`` pairs (here, there) and the experiment's comparisons on the remote's
    devices, each side's path, label and expectation."""
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


def _row(experiment, kind, pair, ref: TraceReader, cand: TraceReader, verdict, tol) -> dict:
    result = compare.perstep(ref, cand)
    worst, step = compare.worst(result.rows, "max_dparam")
    return {
        "experiment": experiment,
        "kind": kind,
        "name": pair["name"],
        "dtype": pair["dtype"],
        "reference": pair["reference"]["label"],
        "candidate": pair["candidate"]["label"],
        "worst_dparam": worst,
        "worst_step": step,
        "bitwise_identical": result.bitwise_identical,
        "tolerance": tol,
        "verdict": verdict(worst) if verdict else "",
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
    for pair in params["same"]:
        ref, cand = _open(pair["reference"], files), _open(pair["candidate"], files)
        out.append(_row(e, "same run", pair, ref, cand, None, ""))
    for comp in params["comparisons"]:
        ref, cand = _open(comp["reference"], files), _open(comp["candidate"], files)
        tol = float(comp["tolerance"])

        def verdict(worst, tol=tol, expect=comp["expect"]):
            return verdicts.tolerance_verdict(worst, tol, expect)

        out.append(_row(e, "comparison", comp, ref, cand, verdict, tol))
    return out


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.3g}" if v == v else "nan"
    return str(v)


def markdown(table: list[dict], manifest: Mapping) -> str:
    """The table as Markdown, headed by where the remote's results came from."""
    remote = manifest.get("remote", {})
    lines = [
        (
            f"Remote host `{manifest['host']}` ({remote.get('hostname', '?')}, "
            f"{remote.get('system', '?')}, {remote.get('cpu', '?')}), checkout "
            f"`{manifest['path']}` at commit `{manifest['commit'][:12]}`."
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
                _fmt(r[c])
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


def crosshost_job(
    params: Mapping, manifest_path: str, out_csv: str, out_md: str, log: logging.Logger
) -> list[dict]:
    """Write the cross-host table of one experiment and host (CSV at full precision, and
    Markdown)."""
    manifest = json.loads(Path(manifest_path).read_text(encoding="utf-8"))
    table = rows(params, manifest)
    with atomic_path(out_csv) as tmp, open(tmp, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, COLUMNS, lineterminator="\n")
        w.writeheader()
        for r in table:
            w.writerow({k: repr(v) if isinstance(v, float) else v for k, v in r.items()})
    with atomic_path(out_md) as tmp:
        tmp.write_text(markdown(table, manifest), encoding="utf-8")
    log.info("%s vs %s: %d rows", params["experiment"], params["host"], len(table))
    return table
