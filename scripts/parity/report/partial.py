"""The summary after a failed run: which comparison results are still current, and the
partial summary that names each comparison without one.

After a failed run, :func:`after_failed_run` (``onerror``, rules/functions/summary.smk)
keeps ``summary.csv`` only if every result it was made from is still the current result
of its comparison (:func:`summary_problems`); else it removes it (so the next run's
summary job makes it again: Snakemake reruns a missing output) and writes
``summary.partial.*`` beside it, with an ``error`` row naming the log of each comparison
that has no current result (:func:`partial_summary`). Both under the tables' lock, so
two runs in one folder never both rewrite them. With remote hosts, each row a host owes
and cannot give is an ``error`` row naming the host, the stage that failed and the log
(:func:`remote_error_rows`). The rows and tables are ``parity.report.summary``'s.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from parity.compare import verdicts
from parity.core import hosts, integrity, paths
from parity.core.config import canonical_hash
from parity.core.fileio import exclusive_lock
from parity.plan import frameworks, versions
from parity.plan.keys import Comparison
from parity.remote import crosshost
from parity.render.markdown import md_text
from parity.report.summary import (
    partial_paths,
    remove_files,
    summary_rows,
    table_paths,
    write_tables,
)

#: How long ``onerror`` waits for another run that holds the tables' lock, then leaves
#: the tables to it.
ONERROR_WAIT = 30.0


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
        return None, f"{path} was made under another config{config_change(r, job)}"
    if code is not None and r.get("code") != code:
        return None, f"{path} was made by other code"
    gone = integrity.changed(r.get("sources", {}))
    if gone:
        return None, f"{path} is out of date: " + "; ".join(gone)
    return r, ""


def config_change(result: Mapping, job: Mapping) -> str:
    """What a result made under another config than ``job``'s was judged with, where the
    result says (its tolerance, its expectation): `` (its verdict pass was judged at
    tolerance 1e-06; the config now says 1e-09)``; else ``""``."""
    now = job.get("comparison", {})
    was, says = [], []
    for key, what in (("tolerance", "tolerance"), ("expect", "expectation")):
        if key in result and key in now and result[key] != now[key]:
            fmt = repr if key == "expect" else "{:g}".format
            was.append(f"{what} {fmt(result[key])}")
            says.append(fmt(now[key]))
    if not was:
        return ""
    verdict = f"its verdict {result['verdict']}" if "verdict" in result else "it"
    was_text, says_text = " and ".join(was), " and ".join(says)
    return f" ({verdict} was judged at {was_text}; the config now says {says_text})"


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
    ``job`` (``codes``: kind → code hash of its adapter)."""
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
    out = integrity.altered(record["tables"], record_path)
    table = record["tables"].get("csv", {}).get("path", "summary.csv")
    if record.get("params_sha256") != canonical_hash(list(unsupported)):
        out.append(f"{table} was made under another config (other unsupported cells)")
    if codes.get("summary") is not None and record.get("code") != codes["summary"]:
        out.append(f"{table} was made by other code")
    want = {c.result(k) for c, _ in comparisons for k in c.kinds}
    want |= {j["result"] for j in remote_jobs}
    if set(record["made_from"]) != want:
        extra, lacking = set(record["made_from"]) - want, want - set(record["made_from"])
        out.append(
            f"{table} was made from another set of comparisons than the config's"
            + (f" (not in the config: {', '.join(sorted(extra)[:3])})" if extra else "")
            + (f" (missing: {', '.join(sorted(lacking)[:3])})" if lacking else "")
        )
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


def _upstream_failure(key) -> str | None:
    """Why run ``key`` never started, where a job it needs failed: the first of its
    experiment's fixture and, for an own model's port, its build and its check
    (``own_check``) whose output is missing and whose log exists, as "run … never ran: …
    failed; see <log>"; None when none did."""
    fields = {"experiment": key.experiment, "framework": key.framework, "device": key.device}
    steps = [("its fixture job", paths.FIXTURE, paths.FIXTURE_LOG)]
    if key.framework in frameworks.RUST_FRAMEWORKS:
        steps += [
            ("the build of its port", paths.OWN_BINARY, paths.OWN_BUILD_LOG),
            ("the check of its port (own_check)", paths.OWN_CHECK, paths.OWN_CHECK_LOG),
        ]
    for what, output, log in steps:
        output, log = output.format(**fields), log.format(**fields)
        if not os.path.exists(output) and os.path.exists(log):
            return f"run {key.label} never ran: {what} failed; see {log}"
    return None


def partial_summary(
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
    row whose status says why and names the log to read: the runner build's, or the
    failed job's before a run (:func:`_upstream_failure`), or the training job's when a
    trace is missing (that run failed), else the comparison job's. Each cross-host job of
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
        upstream = [why for k in missing.values() if (why := _upstream_failure(k))]
        first = next(iter(missing.values()), None)
        log = first.log if first else c.log("perstep")
        status = f"no current result ({problem}); see {log}"
        if unbuilt:
            status = f"no current result: {unbuilt[0]}"
        elif upstream:
            status = f"no current result: {upstream[0]}"
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
        + (f" ({md_text('; '.join(why[:3]))})" if why else "")
        + " and was removed: the next successful run writes it again.\n\n"
    )
    written = write_tables(rows, out_csv, out_md, len(results), intro)
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
                remove_files(partial_paths(paths.SUMMARY_PARTIAL))
                return f"{paths.SUMMARY.format(ext='csv')} is current; it was kept"
            removed = remove_files(table_paths(paths.SUMMARY, paths.SUMMARY_SOURCES))
            n = partial_summary(
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
