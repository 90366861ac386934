"""The jobs over all comparisons: the summary (and the partial one written when a run
fails), the check that gates on it, and the study's framework table.

A summary is never shown as current when it is not: ``summary.csv`` comes with
``summary.sources.json`` (``integrity.write_record``: the run, and the sha256 of every
result it was made from), and after a failed run :func:`after_failed_run` keeps it only
if every result it was made from is still the current result of its comparison; else it
removes it (so the next run's summary job makes it again: Snakemake reruns a missing
output) and writes ``summary.partial.*`` beside it, with an ``error`` row naming the log
of each comparison that has no current result. Both are written under one lock, so two
runs in one folder never both rewrite them.

With remote hosts (config ``remote``), the summary also gathers each host's cross-host
results (``parity.remote.crosshost``): their rows are summary rows whose device is the remote's
label (``cpu@mac``), judged by the same ``parity.compare.verdicts``; after a failed run, each row
a host owes and cannot give is an ``error`` row naming the host, the stage that failed
and the log (:func:`remote_error_rows`).

Plain functions of what the rules resolved and of paths; ``scripts/summary.py``,
``scripts/check.py`` and ``scripts/framework_summary.py`` are thin adapters.

Over 400 lines on purpose: the summary, its partial twin after a failed run and ``check``
write and read the same sources record and rows, so they stay in one module.
"""

from __future__ import annotations

import csv
import logging
import os
from collections.abc import Mapping, Sequence

from parity.compare import verdicts
from parity.core import hosts, integrity, paths
from parity.core.config import canonical_hash
from parity.core.fileio import exclusive_lock
from parity.plan import frameworks, versions
from parity.plan.keys import Comparison
from parity.remote import crosshost
from parity.render import tables

#: How long ``onerror`` waits for another run that holds the tables' lock, then leaves
#: the tables to it.
ONERROR_WAIT = 30.0
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
        rows.append(
            {
                "experiment": r["experiment"],
                "comparison": r["comparison"],
                "device": r["device"],
                "pair": f"{r['reference']} vs {r['candidate']}",
                "step0_identical": r["step0_identical"],
                "bitwise_identical": r["bitwise_identical"],
                "status": r["status"],
                "worst_dparam": r["worst_dparam"],
                "worst_step": r["worst_step"],
                "worst_where": r["worst_where"],
                "final_dparam": r["final_dparam"],
                "worst_dloss": r["worst_dloss"],
                "torch_f64": s.get("torch_f64"),
                "candle_f64": s.get("candle_f64"),
                "f64_f64": s.get("f64_f64"),
                "tolerance": r["tolerance"],
                "verdict": r["verdict"],
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


def _write_tables(
    rows: list[dict], out_csv: str, out_md: str, n_results: int, intro: str = ""
) -> dict:
    """Write summary.csv and its Markdown twin, which says which run made it from how many
    results (its record lists them); returns what was written, kind → path."""
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
        head += f"- **{r['experiment']} {r['comparison']} {r['device']}: {r['verdict']}**"
        if r["verdict"] == verdicts.UNEXPECTED_PASS:
            head += " (a negative control passed: the harness no longer sees this fault)"
        head += "\n"
    if bad:
        head += "\n"
    made = (
        f"\nMade by run {integrity.run_id()} from {n_results} comparison results; "
        f"`{os.path.basename(_record_of(out_md))}` lists each with its sha256.\n"
    )
    tables.write_twins(out_md, head + tables.markdown_table(rows, md_cols, fmt) + made)
    return {"csv": out_csv, "md": out_md, "html": _html(out_md)}


def _record_of(md_path: str) -> str:
    return str(md_path).rsplit(".", 1)[0] + ".sources.json"


def _html(md_path: str) -> str:
    return str(md_path).rsplit(".", 1)[0] + ".html"


def summary_job(
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
        written = _write_tables(rows, out_csv, out_md, len(found))
        integrity.write_record(
            out_record,
            "summary",
            made_from,
            written,
            partial=False,
            params_sha256=canonical_hash(list(unsupported)),
            code=code,
        )
        _remove(partial_paths(paths.SUMMARY_PARTIAL))
    return rows


def partial_paths(pattern: str) -> list[str]:
    """The files of a partial table (``summary.partial.*``, ``probes.partial.*``)."""
    return [pattern.format(ext=e) for e in ("csv", "md", "html", "sources.json")]


def table_paths(pattern: str, record: str) -> list[str]:
    """The files a table rule writes (csv, md, html) and its record."""
    return [pattern.format(ext=e) for e in ("csv", "md", "html")] + [record]


def _remove(files: Sequence[str]) -> list[str]:
    gone = [f for f in files if os.path.exists(f)]
    for f in gone:
        os.unlink(f)
    return gone


# ----- staleness -------------------------------------------------------------------------


def current_result(path: str, job: Mapping, code: str | None) -> tuple[dict | None, str]:
    """(result, "") when ``path`` holds the current result of a comparison job whose params
    are ``job`` (``Plan.comparison_job``) and whose code hash is ``code``: sealed intact,
    made with these params and this code, from inputs that are all still as they were read.
    Else (None, why not)."""
    if not os.path.exists(path):
        return None, f"{path} does not exist"
    try:
        r = integrity.read_sealed_json(path)
    except integrity.IntegrityError as e:
        return None, str(e)
    if r.get("job_sha256") != canonical_hash(job):
        return None, f"{path} was made under another config"
    if code is not None and r.get("code") != code:
        return None, f"{path} was made by other code"
    gone = integrity.changed(r.get("sources", {}))
    if gone:
        return None, f"{path} is out of date: " + "; ".join(gone)
    return r, ""


#: Every comparison of the plan with what its jobs receive (``Plan.comparison_job``), as
#: the rules resolve them: what the staleness checks compare each result with.
ComparisonJobs = Sequence[tuple[Comparison, Mapping]]
#: Every cross-host job (one per remote host and experiment) as the rules resolve them:
#: ``{"host", "experiment", "result": its sealed result's path, "job": its params,
#: crosshost.crosshost_params}``. Empty without remote hosts.
RemoteJobs = Sequence[Mapping]


def remote_error_rows(job: Mapping, problem: str) -> list[dict]:
    """The ``error`` rows of one cross-host job without a current result (``job``: one of
    :data:`RemoteJobs`; ``problem``: why its result is not current): one per row the host
    owes the summary (``crosshost.expected_cells``). Each status names the host, the stage
    that failed and its error (the host's ``status.json``, ``hosts.host_status``) and the
    log to read; where a trace the row compares did not come back, it names that trace.
    When the host's results are all here (its manifest is written), the cross-host job is
    what failed, and its log is named."""
    host, params = job["host"], job["job"]
    failed = hosts.host_status(host)
    if failed is None:
        log = paths.CROSSHOST_LOG.format(experiment=params["experiment"], host=host)
        why = f"remote host {host}: no current cross-host result ({problem}); see {log}"
    else:
        why = (
            f"remote host {host}: {failed['stage']} failed ({failed['error']}); see {failed['log']}"
        )
    pairs = [*params["same"], *params["comparisons"]]
    rows = []
    for cell, pair in zip(crosshost.expected_cells(params), pairs, strict=True):
        gone = [
            pair[role]["label"]
            for role in ("reference", "candidate")
            if not os.path.exists(pair[role]["path"])
        ]
        status = why + (f" (not here: {', '.join(gone)})" if gone else "")
        rows.append({**cell, "status": status})
    return rows


def comparison_state(
    c: Comparison, job: Mapping, codes: Mapping[str, str | None]
) -> dict[str, tuple[dict | None, str]]:
    """:func:`current_result` of each table kind of comparison ``c``, whose jobs receive
    ``job`` (``codes``: kind → code hash of its job script)."""
    return {k: current_result(c.result(k), job, codes.get(k)) for k in c.kinds}


def summary_problems(
    comparisons: ComparisonJobs,
    unsupported: Sequence[Mapping],
    codes: Mapping[str, str | None],
    record_path: str = paths.SUMMARY_SOURCES,
    remote_jobs: RemoteJobs = (),
) -> list[str]:
    """Why ``summary.csv`` is not the current summary of ``comparisons`` (and of the
    cross-host jobs ``remote_jobs``, whose code hash is ``codes["crosshost"]``): empty when
    it is (its record intact, its files as written, made with these params and this code
    from exactly the plan's results, each of them current)."""
    try:
        record = integrity.read_sealed_json(record_path)
    except (OSError, integrity.IntegrityError) as e:
        return [f"{record_path}: {getattr(e, 'problem', None) or e}"]
    out = integrity.changed(record["tables"])
    if record.get("params_sha256") != canonical_hash(list(unsupported)):
        out.append("made under another config")
    if codes.get("summary") is not None and record.get("code") != codes["summary"]:
        out.append("made by other code")
    want = {c.result(k) for c, _ in comparisons for k in c.kinds}
    want |= {j["result"] for j in remote_jobs}
    if set(record["made_from"]) != want:
        out.append("made from another set of comparisons")
    out += integrity.changed(record["made_from"])
    for c, job in comparisons:
        out += [why for r, why in comparison_state(c, job, codes).values() if r is None]
    for j in remote_jobs:
        r, why = current_result(j["result"], j["job"], codes.get("crosshost"))
        out += [why] if r is None else []
    return out


def _build_failure(key, expectation: Mapping) -> str | None:
    """Why run ``key`` has no trace when its runner did not build: the release's cargo
    errors and build log (``versions.build_failure``); None for a PyTorch run or a runner
    that built."""
    version = expectation.get("framework_version")
    if key.framework not in frameworks.RUST_FRAMEWORKS or not version:
        return None
    return versions.build_failure(key.framework, version, key.device)


def partial_summary_job(
    comparisons: ComparisonJobs,
    unsupported: Sequence[Mapping],
    codes: Mapping[str, str | None],
    out_csv: str,
    out_md: str,
    out_record: str,
    why: Sequence[str] = (),
    remote_jobs: RemoteJobs = (),
) -> int:
    """Summary of a run that failed part-way, written beside ``summary.csv``: every
    comparison whose per-step result is current (:func:`current_result`) is summarised
    (with its split and diagnosis where those are current); each other one is an ``error``
    row whose status says why and names the log to read: the training job's when a trace
    is missing (that run failed), else the comparison job's. Each cross-host job of
    ``remote_jobs`` with a current result gives its rows; each other one gives an
    ``error`` row per row its host owes (:func:`remote_error_rows`: the host, the stage
    that failed, the log). ``why`` says why summary.csv is not current. Returns the
    number of error rows."""
    results, errors, made_from = {}, [], {}
    for c, job in comparisons:
        state = comparison_state(c, job, codes)
        for k, (r, _) in state.items():
            if r is not None and state["perstep"][0] is not None:
                results[c.result(k)] = r
                made_from[c.result(k)] = integrity.file_record(c.result(k))
        r, problem = state["perstep"]
        if r is not None:
            continue
        missing = {role: k for role, k in c.keys.items() if not os.path.exists(k.trace)}
        unbuilt = [
            why
            for role, k in missing.items()
            if (why := _build_failure(k, job["expectations"][role]))
        ]
        first = next(iter(missing.values()), None)
        log = first.log if first else c.log("perstep")
        status = f"no current result ({problem}); see {log}"
        if unbuilt:
            status = f"no current result: {unbuilt[0]}"
        elif first:
            status += f" (run {first.label} failed: its trace is missing)"
        errors.append(
            {
                "experiment": c.experiment,
                "comparison": c.name,
                "device": c.device,
                "pair": f"{c.reference.label} vs {c.candidate.label}",
                "status": status,
                "tolerance": c.tolerance,
                "expected_verdict": verdicts.EXPECTATIONS[c.expect],
            }
        )
    for j in remote_jobs:
        r, problem = current_result(j["result"], j["job"], codes.get("crosshost"))
        if r is not None:
            results[j["result"]] = r
            made_from[j["result"]] = integrity.file_record(j["result"])
        else:
            errors += remote_error_rows(j, problem)
    rows = summary_rows(results, unsupported, errors)
    intro = (
        f"**A run failed ({integrity.run_id()}).** This partial summary lists what could be "
        f"summarised; {len(errors)} comparison(s) have no current result (verdict `error`, "
        "with the log to read; a remote host's, with the host and the stage that failed). "
        "`summary.csv` is not current"
        + (f" ({'; '.join(why[:3])})" if why else "")
        + " and was removed: the next successful run writes it again.\n\n"
    )
    written = _write_tables(rows, out_csv, out_md, len(results), intro)
    integrity.write_record(
        out_record, "summary.partial", made_from, written, partial=True, errors=len(errors)
    )
    return len(errors)


def after_failed_run(
    comparisons: ComparisonJobs,
    unsupported: Sequence[Mapping],
    codes: Mapping[str, str | None],
    remote_jobs: RemoteJobs = (),
) -> str:
    """What ``onerror`` does with the summary (rules/common.smk): under the tables' lock,
    keep ``summary.csv`` when it is still current (:func:`summary_problems`, with the
    cross-host jobs ``remote_jobs``) and remove a stale partial summary; else remove
    ``summary.csv`` (and its twins and record, so no earlier verdict is shown as current
    and the next run makes it again) and write ``summary.partial.*``. Returns a line for
    the console. When another run holds the lock, nothing is touched (that run writes
    them)."""
    try:
        with exclusive_lock(paths.TABLES_LOCK, timeout=ONERROR_WAIT):
            why = summary_problems(comparisons, unsupported, codes, remote_jobs=remote_jobs)
            if not why:
                _remove(partial_paths(paths.SUMMARY_PARTIAL))
                return f"{paths.SUMMARY.format(ext='csv')} is current; it was kept"
            removed = _remove(table_paths(paths.SUMMARY, paths.SUMMARY_SOURCES))
            n = partial_summary_job(
                comparisons,
                unsupported,
                codes,
                *partial_paths(paths.SUMMARY_PARTIAL)[:2],
                partial_paths(paths.SUMMARY_PARTIAL)[3],
                why,
                remote_jobs,
            )
    except Exception as e:  # onerror must not hide the run's own error
        return f"the partial summary could not be written: {e}"
    return (
        f"{n} comparison(s) have no current result; {paths.SUMMARY_PARTIAL.format(ext='md')} "
        "lists them with verdict 'error' and the log to read"
        + (f"; removed the stale {', '.join(removed)}" if removed else "")
    )


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


def check_job(
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
        if r["verdict"] == verdicts.ERROR:
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


FRAMEWORK_SUMMARY_COLUMNS = (
    "quantity",
    "experiment",
    "steps",
    "candle_vs_pytorch",
    "burn_vs_pytorch",
)


def framework_summary_job(items: Sequence[Mapping], out_csv: str, out_md: str) -> list[dict]:
    """The study's framework table, computed from the runs: per configured experiment, the
    f32 max|dparam| after the last step and the f64-vs-f64 distance after the last step,
    for each framework against PyTorch on the CPU, read from the result files ``items``
    name (``plan.Plan.framework_summary_params``). A framework without runs says ``not run``; no
    number is ever typed in."""
    rows = []
    for item in items:
        e, steps = item["experiment"], item["steps"]
        f32 = {"quantity": f"{item['label']} {steps} steps, f32 max|dparam|"}
        f64 = {"quantity": f"{item['label']} {steps} steps, f64 vs f64"}
        for fw, found in item["results"].items():
            col = f"{fw}_vs_pytorch"
            if found is None:
                f32[col] = f64[col] = "not run"
                continue
            f32[col] = integrity.read_sealed_json(found["perstep"])["final_dparam"]
            if found["split"] is None:
                f64[col] = "no f64 runs"
            else:
                f64[col] = integrity.read_sealed_json(found["split"])["final"]["f64_f64"]
        for r in (f32, f64):
            r.update(experiment=e, steps=steps)
            for col in FRAMEWORK_SUMMARY_COLUMNS[3:]:
                r.setdefault(col, "not run")  # a framework this workflow does not run yet
            rows.append(r)
    tables.write_csv(out_csv, rows, FRAMEWORK_SUMMARY_COLUMNS)
    fmt = {
        c: (lambda v: v if isinstance(v, str) else tables.sci(v))
        for c in ("candle_vs_pytorch", "burn_vs_pytorch")
    }
    tables.write_twins(
        out_md,
        "# Framework summary\n\n"
        + tables.markdown_table(rows, ("quantity", "burn_vs_pytorch", "candle_vs_pytorch"), fmt),
    )
    return rows
