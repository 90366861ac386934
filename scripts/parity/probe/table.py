"""The probe table job: every probe result judged against its reference; and, after a
failed run, the partial probe table that names each cell without a result.

Like the summary (``parity.report.summary``), ``probes.csv`` comes with ``probes.sources.json``
(the run, each result's sha256), and :func:`after_failed_run` keeps it only while it is
current, else removes it and writes ``probes.partial.*`` with an ``error`` row, naming the
job's log, for every cell whose result is missing or cannot be trusted.

With remote hosts (config ``remote``: label → devices), the probe results each host
brought back (``results/remote/{host}/probes/…``, listed with their sha256 in its
manifest) are extra rows whose device is the host's label (``cpu@mac``), judged like this
host's rows against the same reference (the probe's exact values, else PyTorch on this
host's CPU) with the known bugs of the device before ``@``. A host without results is an
``error`` row per cell naming the host, the stage that failed and its log.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from parity.compare import verdicts
from parity.core import integrity, paths
from parity.core.config import canonical_hash
from parity.core.fileio import exclusive_lock
from parity.core.hosts import device_label, host_status, remote_file
from parity.plan import frameworks, versions
from parity.probe.judge import judge_probe_row
from parity.probe.plan import ProbeKey, ProbePlan
from parity.probe.results import ProbeResultError, read_results
from parity.render import tables

#: Remote hosts' devices as the probe table receives them: label → devices (config
#: ``remote``'s ``devices`` of each host); empty without remote hosts.
RemoteHosts = Mapping[str, Sequence[str]]

#: How long ``onerror`` waits for another run that holds the tables' lock, then leaves
#: the tables to it.
ONERROR_WAIT = 30.0
#: How long the table job waits for another run's ``onerror`` to finish with the tables.
LOCK_WAIT = 600.0


def probe_log(key: ProbeKey) -> str:
    """The log of the job that writes ``key``'s result."""
    return paths.PROBE_LOG.format(framework=key.runner, dtype=key.dtype, device=key.device)


def gather(plan: ProbePlan) -> tuple[dict, dict[ProbeKey, Exception], dict[str, dict]]:
    """Every result of ``plan`` that can be read: (outcomes by key, the error of each
    other key, file record of each result read)."""
    results, errors, made_from = {}, {}, {}
    for key in plan.jobs():
        if not os.path.exists(key.result):
            unbuilt = key.framework in frameworks.RUST_FRAMEWORKS and versions.build_failure(
                key.framework, plan.version_of(key), key.device
            )
            errors[key] = (
                BuildFailed(unbuilt)
                if unbuilt
                else FileNotFoundError(f"{key.result} does not exist")
            )
            continue
        try:
            made_from[key.result] = integrity.file_record(key.result)
            # held to the build this checkout and config make for it (plan.source_id)
            probe = plan.probe(key.probe)
            _, results[key] = read_results(key.result, probe, key, plan.source_id(key))
        except ProbeResultError as e:
            made_from.pop(key.result, None)
            errors[key] = e
    return results, errors, made_from


class BuildFailed(RuntimeError):
    """A probe cell without a result because its runner's release did not build; the
    message gives cargo's errors and the build log (``versions.build_failure``)."""


class RemoteResultError(ValueError):
    """A remote host's probe result that cannot be judged: the host has no results here,
    or the file is not the one its manifest recorded."""


@dataclass
class RemoteProbes:
    """What one remote host's probe rows are made from: its probe plan (this plan on the
    host's devices), the outcomes read by key (keys name the device as the host ran it,
    ``cpu``) and the error of each other key."""

    plan: ProbePlan
    results: dict = field(default_factory=dict)
    errors: dict = field(default_factory=dict)


def remote_plan(plan: ProbePlan, devices: Sequence[str]) -> ProbePlan:
    """The probe cells a host with ``devices`` runs: what its device targets make and
    the remote job brings back (``remote.fetch_params``)."""
    return plan.for_devices(devices)


def remote_results(plan: ProbePlan, hosts: RemoteHosts) -> list[str]:
    """Every probe result brought back from the hosts (``results/remote/{host}/probes/…``)."""
    return [
        remote_file(host, k.result)
        for host, devices in hosts.items()
        for k in remote_plan(plan, devices).jobs()
    ]


def gather_remote(
    plan: ProbePlan, hosts: RemoteHosts
) -> tuple[dict[str, RemoteProbes], dict[str, dict]]:
    """Every probe result brought back from each host that can be read: (host →
    :class:`RemoteProbes`, file record of each result read). A result is read only when
    the host's manifest lists it with the file's sha256; else its cell's error says why
    (:class:`RemoteResultError`: the host's failed stage and log when it has no manifest)."""
    out, made_from = {}, {}
    for host, devices in hosts.items():
        hp = RemoteProbes(remote_plan(plan, devices))
        out[host] = hp
        failed = host_status(host)
        files: dict = {}
        if failed is None:
            with open(paths.REMOTE_MANIFEST.format(host=host), encoding="utf-8") as f:
                files = json.load(f).get("files", {})
        for key in hp.plan.jobs():
            path = remote_file(host, key.result)
            if failed is not None:
                hp.errors[key] = RemoteResultError(
                    f"remote host {host}: {failed['stage']} failed ({failed['error']})"
                )
                continue
            if path not in files:
                hp.errors[key] = RemoteResultError(f"{path} is not in the host's manifest")
                continue
            try:
                record = integrity.file_record(path)
            except OSError as e:
                hp.errors[key] = RemoteResultError(f"{path}: {e}")
                continue
            if record["sha256"] != files[path]:
                hp.errors[key] = RemoteResultError(
                    f"{path}: sha256 differs from the manifest's; rerun the remote target"
                )
                continue
            try:
                probe = plan.probe(key.probe)
                _, hp.results[key] = read_results(path, probe, key, plan.source_id(key))
            except ProbeResultError as e:
                hp.errors[key] = e
                continue
            made_from[path] = record
    return out, made_from


def _params_hash(plan: ProbePlan, hosts: RemoteHosts) -> str:
    """The hash of what the table is made under: the plan, and the remote hosts' devices
    when there are any (a table without remote hosts hashes as before)."""
    params = plan.to_params()
    if hosts:
        params = {**params, "remote": {h: list(d) for h, d in hosts.items()}}
    return canonical_hash(params)


def probes_table(
    plan: ProbePlan,
    out_csv: str,
    out_md: str,
    log: logging.Logger,
    out_record: str | None = None,
    code: str | None = None,
    remote_hosts: RemoteHosts | None = None,
) -> list[dict]:
    """The probe table: one row per (probe, case, quantity, framework, device, dtype).

    Reads every result of ``plan`` (``results/probes/…``), judges it against the probe's
    exact values or PyTorch on the CPU (``parity.probe.judge.judge_probe_row``), and lists
    unsupported cells with their reason; then the same for each remote host of
    ``remote_hosts`` (label → devices), whose rows' device is ``cpu@mac``
    (:func:`gather_remote`). Raises ``results.ProbeResultError`` for a result file
    that is stale, malformed or corrupt, :class:`RemoteResultError` for a remote result
    that is not its manifest's; nothing is written then. ``out_record``
    (``probes.sources.json``) records the run and each result's sha256; written under the
    tables' lock, which also removes a partial table an earlier failed run left.
    """
    hosts = dict(remote_hosts or {})
    results, errors, made_from = gather(plan)
    remote, remote_made_from = gather_remote(plan, hosts)
    if errors:
        raise next(iter(errors.values()))
    for hp in remote.values():
        if hp.errors:
            raise next(iter(hp.errors.values()))
    made_from.update(remote_made_from)
    rows = table_rows(plan, results, errors, remote)
    with exclusive_lock(paths.TABLES_LOCK, LOCK_WAIT):
        written = write_table(plan, rows, out_csv, out_md, log)
        if out_record is not None:
            integrity.write_record(
                out_record,
                "probes",
                made_from,
                written,
                partial=False,
                params_sha256=_params_hash(plan, hosts),
                code=code,
            )
            _remove(_partial())
    return rows


def _partial() -> list[str]:
    return [paths.PROBES_PARTIAL.format(ext=e) for e in ("csv", "md", "html", "sources.json")]


def _remove(files) -> list[str]:
    gone = [f for f in files if os.path.exists(f)]
    for f in gone:
        os.unlink(f)
    return gone


def table_rows(
    plan: ProbePlan,
    results: Mapping[ProbeKey, dict],
    errors: Mapping[ProbeKey, Exception],
    remote: Mapping[str, RemoteProbes] | None = None,
) -> list[dict]:
    """The table's rows from the results read (:func:`gather`); a cell in ``errors`` is a
    row with verdict ``error`` naming why and the log of its job. Then each remote host's
    rows (``remote``, :func:`gather_remote`): its cells with the device ``cpu@mac``, judged
    against this host's references (``results``); an error names the host's log.

    Besides the verdict, a row holds the values' ``shape``, and where the float64-referenced
    rule judged it (f32, f16 and bf16 rows against PyTorch in their dtype) PyTorch
    float64's values (``reference64_values``), ``fp64_diff`` = max|values − torch f64| and
    ``reference_fp64_diff`` = max|torch in the row's dtype − torch f64|."""
    rows = []
    for key in plan.cells():
        rows += _cell_rows(plan, key, key, results, results, errors.get(key), probe_log(key))
    for host, hp in (remote or {}).items():
        log = paths.REMOTE_LOG.format(host=host)
        for key in hp.plan.cells():
            shown = replace(key, device=device_label(key.device, host))
            rows += _cell_rows(plan, key, shown, hp.results, results, hp.errors.get(key), log)
    return rows


def _cell_rows(
    plan: ProbePlan,
    key: ProbeKey,
    shown: ProbeKey,
    own: Mapping[ProbeKey, dict],
    references: Mapping[ProbeKey, dict],
    error: Exception | None,
    log: str,
) -> list[dict]:
    """The rows of one cell: ``key`` the run as it was made (its results in ``own``),
    ``shown`` the run as the table names and judges it (``cpu@mac`` for a remote host's;
    its reference runs are looked up in ``references``), ``error`` why it has no result."""
    probe = plan.probe(key.probe)
    reason = plan.unsupported(key)
    rows = []
    for case, q in probe.quantities():
        row = {
            "probe": key.probe,
            "case": case,
            "quantity": q,
            "framework": key.framework,
            "version": plan.version_of(key),
            "device": shown.device,
            "dtype": key.dtype,
            "shape": None,
            "values": None,
            "reference": "",
            "reference_values": None,
            "reference64_values": None,
            "max_diff": None,
            "fp64_diff": None,
            "reference_fp64_diff": None,
            "tolerance": None,
        }
        if reason is not None:
            rows.append({**row, "verdict": verdicts.UNSUPPORTED, "note": reason})
            continue
        if error is not None:
            note = (
                f"no current result: {error}"
                if isinstance(error, BuildFailed)
                else f"no current result ({error}); see {log}"
            )
            rows.append({**row, "verdict": verdicts.ERROR, "note": note})
            continue
        outcome = own[key][(case, q)]
        ref_run = references.get(shown.reference, {}).get((case, q))
        ref64_run = references.get(shown.reference64, {}).get((case, q))
        j = judge_probe_row(
            probe,
            shown,
            outcome,
            None if shown.is_reference else ref_run,
            ref64_run,
            plan.fp64_rule,
            plan.version_of(key) or None,
        )
        note = j.message
        if j.verdict == verdicts.KNOWN_BUG_FIXED:
            note = "; ".join(filter(None, ["update the probe file's known_bug", note]))
        rows.append(
            {
                **row,
                "shape": None if outcome.shape is None else list(outcome.shape),
                "values": None if outcome.values is None else outcome.values.tolist(),
                "reference": j.reference,
                "reference_values": (
                    None if j.reference_values is None else j.reference_values.tolist()
                ),
                "reference64_values": (
                    None if j.reference64_values is None else j.reference64_values.tolist()
                ),
                "max_diff": j.worst,
                "fp64_diff": None if j.fp64 is None else j.fp64.fp64_diff,
                "reference_fp64_diff": (None if j.fp64 is None else j.fp64.reference_fp64_diff),
                "tolerance": j.tolerance,
                "verdict": j.verdict,
                "note": note,
            }
        )
    return rows


def rules_text(plan: ProbePlan) -> str:
    """The paragraph under the Markdown twin's title: how rows are judged."""
    rule = plan.fp64_rule
    m = rule["multiplier"]
    m = "3 below 1000 elements, else 2" if m == "auto" else f"{float(m):g}"
    return (
        "Each value is compared with the probe's exact values, else with PyTorch on the CPU "
        "in the row's dtype; shapes must agree (a scalar `[]` equals `[1]`) and integer "
        "quantities must be equal. An f32, f16 or bf16 row passes within the tolerance or "
        "by the float64-referenced rule: max|value − torch f64 cpu| ≤ m · max|torch − "
        f"torch f64 cpu| + {float(rule['floor_ulps']):g} ulp(s) of the row's dtype (m: {m}); "
        "the note says "
        "which rule passed it, with both errors. A case that expects an error passes on the "
        "framework's error.\n\n"
    )


def write_table(
    plan: ProbePlan, rows: list[dict], out_csv: str, out_md: str, log: logging.Logger, intro=""
) -> dict[str, str]:
    """Write the table's CSV and Markdown twin; returns what was written, kind → path."""
    csv_rows = [
        {
            **r,
            "shape": tables.shape_text(r["shape"]),
            "values": tables.values_text(r["values"]),
            "reference_values": tables.values_text(r["reference_values"]),
            "reference64_values": tables.values_text(r["reference64_values"]),
        }
        for r in rows
    ]
    tables.write_csv(out_csv, csv_rows, tables.PROBE_COLUMNS)
    descriptions = {name: p.spec["description"] for name, p in plan.probes.items()}
    notes = {
        name: [f"{c['name']}: {c['note']}" for c in p.cases if c["note"]]
        for name, p in plan.probes.items()
    }
    md = tables.probes_markdown(rows, descriptions, notes, verdicts.PROBE_WORDING)
    md = md.replace("\n", "\n\n" + intro + rules_text(plan), 1)
    md += (
        f"\nMade by run {integrity.run_id()}; "
        f"`{os.path.basename(str(out_md).rsplit('.', 1)[0])}.sources.json` lists every "
        "result it was made from with its sha256.\n"
    )
    tables.write_twins(out_md, md)
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["verdict"]] = counts.get(r["verdict"], 0) + 1
    log.info("%d probe rows: %s", len(rows), counts)
    html = str(out_md).rsplit(".", 1)[0] + ".html"
    return {"csv": out_csv, "md": out_md, "html": html}


def table_problems(
    plan: ProbePlan,
    code: str | None,
    record_path=paths.PROBES_SOURCES,
    remote_hosts: RemoteHosts | None = None,
) -> list:
    """Why ``probes.csv`` is not the current table of ``plan`` (and of the remote hosts'
    results, ``remote_hosts``: label → devices): empty when it is (its record intact, its
    files as written, made with these params and this code from exactly the plan's and
    the hosts' results, each unchanged)."""
    hosts = dict(remote_hosts or {})
    try:
        record = integrity.read_sealed_json(record_path)
    except (OSError, integrity.IntegrityError) as e:
        return [f"{record_path}: {getattr(e, 'problem', None) or e}"]
    out = integrity.altered(record["tables"], record_path)
    table = record["tables"].get("csv", {}).get("path", "probes.csv")
    if record.get("params_sha256") != _params_hash(plan, hosts):
        out.append(f"{table} was made under another config or other probe files")
    if code is not None and record.get("code") != code:
        out.append(f"{table} was made by other code")
    if set(record["made_from"]) != set(plan.results()) | set(remote_results(plan, hosts)):
        out.append(f"{table} was made from another set of probe results")
    return out + integrity.changed(record["made_from"])


def after_failed_run(
    plan: ProbePlan, codes: Mapping[str, str | None], remote_hosts: RemoteHosts | None = None
) -> str:
    """What ``onerror`` does with the probe table (rules/common.smk): under the tables'
    lock, keep ``probes.csv`` while it is current (:func:`table_problems`); else remove it
    (and its twins and record) and write ``probes.partial.*``, where each cell without a
    readable result is an ``error`` row naming its job's log (a remote host's cell: the
    host, the stage that failed and the host's log). Returns a console line."""
    log = logging.getLogger("parity.probe.table")
    hosts = dict(remote_hosts or {})
    try:
        with exclusive_lock(paths.TABLES_LOCK, timeout=ONERROR_WAIT):
            why = table_problems(plan, codes.get("probes_table"), remote_hosts=hosts)
            if not why:
                _remove(_partial())
                return f"{paths.PROBES_TABLE.format(ext='csv')} is current; it was kept"
            removed = _remove(
                [paths.PROBES_TABLE.format(ext=e) for e in ("csv", "md", "html")]
                + [paths.PROBES_SOURCES]
            )
            results, errors, made_from = gather(plan)
            remote, remote_made_from = gather_remote(plan, hosts)
            made_from.update(remote_made_from)
            rows = table_rows(plan, results, errors, remote)
            n_errors = len(errors) + sum(len(hp.errors) for hp in remote.values())
            intro = (
                f"**A run failed ({integrity.run_id()}).** This partial table lists what "
                f"could be judged; {n_errors} probe job(s) have no current result "
                "(verdict `error`, with the log to read). `probes.csv` is not current ("
                + "; ".join(why[:3])
                + ") and was removed: the next successful run writes it again.\n\n"
            )
            part = _partial()
            written = write_table(plan, rows, part[0], part[1], log, intro)
            integrity.write_record(
                part[3], "probes.partial", made_from, written, partial=True, errors=n_errors
            )
    except Exception as e:  # onerror must not hide the run's own error
        return f"the partial probe table could not be written: {e}"
    return (
        f"{n_errors} probe job(s) have no current result; "
        f"{paths.PROBES_PARTIAL.format(ext='md')} names them with verdict 'error' and the log"
        + (f"; removed the stale {', '.join(removed)}" if removed else "")
    )
