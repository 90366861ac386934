"""The comparison jobs: per-step table, float64 split and diagnosis of one comparison,
as plain functions of what the rule resolved and of paths.

One job per comparison (:func:`compare`; rule ``compare``, or ``perstep`` for a comparison
without float64 runs, both through ``scripts/compare.py``): the per-step table
(:func:`perstep_job`) and, with float64 runs, the split and the diagnosis
(:func:`float64_job`, the four traces opened once), so a comparison pays one interpreter
start and one matplotlib import. The script is a thin
adapter from Snakemake's ``snakemake`` object to these functions; tests call them directly. Every
job opens its traces against what the rule says they must carry (:func:`open_trace`), and
writes per table a CSV, its Markdown twin, its figure (drawn in-process from the rows it
computed, ``figures.comparison_figure``) and a machine-readable JSON result for the summary,
sealed (``integrity.write_sealed_json``), which records the sha256 of every file it was made
from (``sources``) and of the tables it wrote (``tables``): the summary can tell a result
that is still current from one whose traces have changed or gone since.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence

from parity.compare import judgement, maths
from parity.compare.diagnosis import diagnosis_findings, float64_tables
from parity.core import integrity
from parity.core.config import canonical_hash
from parity.core.fileio import sha256_file
from parity.plan.keys import Comparison
from parity.render import figures, tables
from parity.trace import fixtures
from parity.trace.reader import TraceReader

#: The traces of a float64 split and a diagnosis, by role.
SPLIT_ROLES = ("ref32", "cand32", "ref64", "cand64")


def open_trace(job: Mapping, role: str, path: str) -> TraceReader:
    """Open the trace of ``role`` (``ref32``, ``cand32``, ``ref64``, ``cand64``) of a
    comparison job and check it against what the config says it must carry."""
    return TraceReader(path, expect=job["expectations"][role])


def open_split(
    job: Mapping, traces: Mapping[str, str], fixture: str, fixture_sha256: str | None = None
) -> dict[str, TraceReader]:
    """The four traces of a float64 split (``ref32``, ``cand32``, ``ref64``, ``cand64`` →
    path), each checked against the config, all against each other and the fixture (whose
    sha256 is ``fixture_sha256`` when the caller has it). Returns the readers, keyed like
    ``traces``."""
    readers = {k: open_trace(job, k, traces[k]) for k in ("ref32", "cand32", "ref64", "cand64")}
    maths.check_comparable(list(readers.values()), fixture_sha256 or sha256_file(fixture))
    return readers


def _provenance(r: TraceReader) -> dict:
    m = r.meta
    return {
        "framework_version": m["framework_version"],
        "host": m["host"],
        "device": m["device"],
        "status": m["status"],
        "diverged_step": m["diverged_step"],
        "cpu": m["runner"].get("cpu"),
        "threads": m["runner"].get("threads"),
    }


def _status(*readers: TraceReader) -> str:
    """``ok``, or which runs diverged (NaN or Inf) and from which step, and which failed
    (the framework raised an error), at which step and with what message."""
    bad = [
        f"{r.meta['run']} {r.meta['dtype']} diverged at step {r.diverged_step}"
        for r in readers
        if r.diverged_step is not None
    ]
    bad += [f["message"] for f in maths.failures(readers)]
    return "; ".join(bad) or "ok"


def sources(paths: Mapping[str, str]) -> dict[str, dict]:
    """What a job reads, by role: each file's path and sha256 (taken before it is read)."""
    return {role: {"path": str(p), "sha256": sha256_file(p)} for role, p in paths.items()}


def job_stamp(job: Mapping, code: str | None) -> dict:
    """What a result records of the job that made it: the hash of its params (``job``,
    ``Plan.comparison_job``) and of its code (the rule's ``code`` param), so that a result
    made under another config or by other code is not taken for a current one."""
    return {"job_sha256": canonical_hash(job), "code": code}


def write_result(
    out_result: str,
    result: Mapping,
    made_from: Mapping[str, dict],
    out_csv: str,
    out_md: str,
    stamp: Mapping,
    figure: Sequence[str] = (),
) -> dict:
    """Write a comparison job's sealed result: ``result`` with ``sources`` (``made_from``,
    :func:`sources`), ``tables`` (the sha256 of the CSV, Markdown and HTML it wrote, and of
    each file of its ``figure``, keyed by suffix: drawn before, so the sha256 is of the
    bytes written) and the job's :func:`job_stamp`."""
    html = str(out_md).rsplit(".", 1)[0] + ".html"
    written = {"csv": out_csv, "md": out_md, "html": html}
    written |= {str(p).rsplit(".", 1)[-1]: p for p in figure}
    full = {**result, "sources": dict(made_from), "tables": sources(written), **stamp}
    integrity.write_sealed_json(out_result, full)
    return full


def read_result(path: str) -> dict:
    """A comparison job's result, its seal checked (``integrity.read_sealed_json``)."""
    return integrity.read_sealed_json(path)


def _json_number(v):
    """``v`` for a JSON result; JSON has neither NaN nor Infinity, so a non-finite value (a
    difference is ``inf`` where a run diverged, see ``closeness``) is stored as null."""
    return None if v is None or (isinstance(v, float) and not math.isfinite(v)) else v


def perstep_job(
    job: Mapping,
    reference: str,
    candidate: str,
    fixture: str,
    out_csv: str,
    out_md: str,
    out_result: str,
    log: logging.Logger,
    code: str | None = None,
    figure: Sequence[str] = (),
) -> dict:
    """Per-step table of a comparison, its Markdown twin, its figure and its result for the
    summary.

    ``job`` is what the rule resolved (``plan.Plan.comparison_job``); the result records
    the first step beyond the tolerance (``maths.first_beyond``) for the jobs after it.
    ``figure`` holds the paths (``.png``, ``.svg``) the figure is drawn to (none: not
    drawn). Raises ``schema.TraceError`` or ``maths.ComparisonError`` for traces that
    cannot be trusted or compared; nothing is written then.
    """
    comp = Comparison.from_params(job["comparison"])
    made_from = sources({"ref32": reference, "cand32": candidate, "fixture": fixture})
    ref = open_trace(job, "ref32", reference)
    cand = open_trace(job, "cand32", candidate)
    maths.check_comparable([ref, cand], made_from["fixture"]["sha256"])
    result = maths.perstep(ref, cand)
    rows = result.rows
    worst, worst_step = maths.worst(rows, "max_dparam")
    worst_where = next((r["where"] for r in rows if r["step"] == worst_step), "")
    dloss, _ = maths.worst(rows, "dloss")
    status = _status(ref, cand)
    failed = maths.failures([ref, cand])
    if failed:
        # compared over the steps before the failure, but never a pass nor an expected fail
        judged = judgement.judge_failed_runs(failed, comp.tolerance)
    elif comp.tolerance == 0:
        # A tolerance of 0 demands bit-for-bit identity (also -0.0 vs 0.0, and the losses).
        judged = judgement.judge_check(
            result.bitwise_identical, comp.expect, "every step identical bit for bit"
        )
    else:
        # closeness counts NaN against NaN as equal; a run that diverged still never passes
        # a tolerance (two runs that diverge alike are not a training that matches).
        judged = judgement.judge_worst(
            worst if status == "ok" else math.inf, worst_where, comp.tolerance, comp.expect
        )
    verdict = judged.verdict
    beyond = maths.first_beyond(rows, comp.tolerance)
    stuck = ", ".join(result.never_updated)
    notes = [
        f"reference: {comp.reference.label} (`{reference}`)",
        f"candidate: {comp.candidate.label} (`{candidate}`)",
        "step 0 identical bit for bit: " + ("yes" if result.step0_identical else "**no**"),
        "every step identical bit for bit: " + ("yes" if result.bitwise_identical else "no"),
        f"status: {status}",
        *([f"**never updated** by one run while the other updated them: {stuck}"] if stuck else []),
        *(
            [f"**a run failed**: {judged.message}; compared over the steps before it"]
            if failed
            else []
        ),
        (
            f"worst max|dparam| {tables.sci(worst)} at step {worst_step} (`{worst_where}`); "
            f"tolerance {comp.tolerance:g}; verdict **{verdict}**"
        ),
    ]
    if result.scalar_first:
        f = result.scalar_first
        notes.append(
            f"the training loop's **{f['scalar']}** differs first, at step {f['step']} "
            f"({f['a']} vs {f['b']})"
        )
    columns = tables.PERSTEP_COLUMNS + (tables.LOOP_COLUMNS if rows and "dlr" in rows[0] else ())
    tables.write_csv(out_csv, rows, columns)
    tables.write_twins(
        out_md,
        tables.perstep_markdown(rows, f"{comp.experiment}: {comp.name} on {comp.device}", notes),
    )
    summary = {
        "kind": "perstep",
        "experiment": comp.experiment,
        "comparison": comp.name,
        "device": comp.device,
        "reference": comp.reference.label,
        "candidate": comp.candidate.label,
        "step0_identical": result.step0_identical,
        "bitwise_identical": result.bitwise_identical,
        "status": status,
        "param_scale": result.param_scale,
        "worst_dparam": _json_number(worst),
        "worst_step": worst_step,
        "worst_where": worst_where,
        "final_dparam": _json_number(rows[-1]["max_dparam"]),
        "worst_dloss": _json_number(dloss),
        "never_updated": result.never_updated,
        "tol_exceeded_step": beyond and beyond["step"],
        "tol_exceeded_where": beyond and beyond["where"],
        "tolerance": comp.tolerance,
        "expect": comp.expect,
        "verdict": verdict,
        "failed_runs": failed,
        "reference_provenance": _provenance(ref),
        "candidate_provenance": _provenance(cand),
    }
    if ref.has_scalars and cand.has_scalars:
        summary |= maths.loop_summary(ref, cand, result, rows, beyond, comp.tolerance)
    if figure:
        draw(comp, "perstep", rows, figure, result.param_scale)
    stamp = job_stamp(job, code)
    summary = write_result(out_result, summary, made_from, out_csv, out_md, stamp, figure)
    log.info("%s %s: worst %s -> %s", comp.experiment, comp.tag, worst, verdict)
    return summary


def draw(
    comp: Comparison,
    kind: str,
    rows: Sequence[Mapping],
    paths: Sequence[str],
    param_scale: float | None,
    perstep: Mapping | None = None,
    diagnosis: Mapping | None = None,
) -> None:
    """The figure of table ``kind`` of ``comp`` from its ``rows``, titled and with the
    tolerance as the report shows it (``figures.comparison_figure``)."""
    figures.comparison_figure(
        kind,
        rows,
        paths,
        f"{comp.experiment} {kind} {comp.tag}",
        comp.tolerance,
        param_scale,
        perstep=perstep,
        diagnosis=diagnosis,
    )


def _split(
    job: Mapping,
    rows: list[dict],
    made_from: Mapping[str, dict],
    out_csv: str,
    out_md: str,
    out_result: str,
    code: str | None,
    failed: Sequence[Mapping] = (),
    figure: Sequence[str] = (),
    scale: float | None = None,
) -> tuple[list[dict], dict]:
    """Write the float64 split table from its ``rows`` (``diagnosis.float64_tables``): its
    CSV, Markdown twins, its ``figure`` (the paths it is drawn to, ``scale`` the per-step
    result's parameter scale) and sealed result, which names the runs that ``failed``
    (``maths.failures``: the split then covers the steps before the first failure);
    returns the rows and the result."""
    comp = Comparison.from_params(job["comparison"])
    keys = comp.keys
    worst = {c: maths.worst(rows, c)[0] for c in tables.SPLIT_COLUMNS[1:]}
    notes = [f"{k}: {keys[k].label}" for k in keys]
    notes.append(
        "columns: max|ref32 − cand32|, max|ref32 − ref64|, max|cand32 − cand64|, "
        "max|ref64 − cand64|"
    )
    notes += [f"**a run failed**: {f['message']}; the steps before it" for f in failed]
    tables.write_csv(out_csv, rows, tables.SPLIT_COLUMNS)
    tables.write_twins(
        out_md,
        tables.split_markdown(
            rows,
            f"{comp.experiment}: {comp.name} on {comp.device}, float64 split",
            comp.reference.run,
            comp.candidate.run,
            notes,
        ),
    )
    summary = {
        "kind": "split",
        "experiment": comp.experiment,
        "comparison": comp.name,
        "device": comp.device,
        "worst": {k: _json_number(v) for k, v in worst.items()},
        "final": {k: _json_number(rows[-1][k]) for k in tables.SPLIT_COLUMNS[1:]},
        "failed_runs": list(failed),
    }
    if figure:
        draw(comp, "split", rows, figure, scale)
    stamp = job_stamp(job, code)
    summary = write_result(out_result, summary, made_from, out_csv, out_md, stamp, figure)
    return rows, summary


DIAGNOSIS_COLUMNS = (
    "step",
    "max_dparam",
    "max_ulp",
    "ulp_at_max",
    "rmse",
    "f64_f64",
    "f64_threshold",
    "ref_err",
    "ref_err_where",
    "cand_err",
    "cand_err_where",
    "same_error",
    "error_corr",
    "error_max_diff",
    "fp64_rule",
    "fp64_ratio",
    "relu_flips_f32",
    "relu_unit_f32",
    "relu_flips_f64",
    "relu_unit_f64",
)


def _diagnosis(
    job: Mapping,
    rows: list[dict],
    perstep: Mapping,
    made_from: Mapping[str, dict],
    out_csv: str,
    out_md: str,
    out_result: str,
    code: str | None,
    figure: Sequence[str] = (),
) -> tuple[list[dict], dict]:
    """Write why a pair differs, per step and localised (docs/diagnosis.md): the diagnosis
    ``rows`` (``diagnosis.float64_tables``), their findings (``diagnosis.diagnosis_findings``)
    and the per-step result ``perstep`` (its first step beyond the tolerance) in the
    sealed result, after its ``figure`` (the paths it is drawn to); returns the rows and
    the result."""
    comp = Comparison.from_params(job["comparison"])
    findings = diagnosis_findings(rows)
    result = {
        "kind": "diagnosis",
        "experiment": comp.experiment,
        "comparison": comp.name,
        "device": comp.device,
        "tol_exceeded_step": perstep["tol_exceeded_step"],
        "tol_exceeded_where": perstep["tol_exceeded_where"],
        **findings,
        "fp64_rule_verdict": judgement.judge_check(
            findings["fp64_rule_first_fail"] is None, comp.expect, "the fp64-referenced rule"
        ).verdict,
        "f64_rounding_factor": job["diagnosis"]["f64_rounding_factor"],
    }
    tables.write_csv(out_csv, rows, DIAGNOSIS_COLUMNS)
    tables.write_twins(out_md, tables.diagnosis_markdown(rows, result, comp))
    if figure:
        # a run with a training loop: its scalars' differences by step, from the per-step result
        loop = {r["step"]: r for r in perstep.get("loop_rows", [])}
        drawn = [{**loop.get(r["step"], {}), **r} for r in rows]
        draw(comp, "diagnosis", drawn, figure, perstep["param_scale"], perstep, result)
    stamp = job_stamp(job, code)
    result = write_result(out_result, result, made_from, out_csv, out_md, stamp, figure)
    return rows, result


#: What the float64 part of a comparison job writes per table (:func:`float64_job`).
FLOAT64_OUTPUTS = ("csv", "md", "result", "png", "svg")


def float64_job(
    job: Mapping,
    traces: Mapping[str, str],
    fixture: str,
    perstep_result: str,
    outputs: Mapping[str, Mapping[str, str]],
    log: logging.Logger,
    code: str | None = None,
) -> dict[str, dict]:
    """The float64 split and the diagnosis of one comparison, in one job: the four traces
    (``ref32``, ``cand32``, ``ref64``, ``cand64`` → path) and the fixture are opened and
    checked once, and read once for both tables (``diagnosis.float64_tables``); the per-step
    result ``perstep_result`` gives the first step beyond the tolerance (the diagnosis
    records it and its figure marks it) and the rounding level both figures draw.

    ``outputs`` has ``split`` and ``diagnosis``, each a mapping with the paths of
    :data:`FLOAT64_OUTPUTS`. Each table's sealed result records what that table was made
    from: the split its traces and the fixture, the diagnosis the per-step result too.
    Returns both results by kind; raises like :func:`perstep_job` (nothing is written
    when the traces cannot be trusted or compared).
    """
    comp = Comparison.from_params(job["comparison"])
    read = {**{k: traces[k] for k in SPLIT_ROLES}, "fixture": fixture, "perstep": perstep_result}
    made_from = sources(read)
    readers = open_split(job, traces, fixture, made_from["fixture"]["sha256"])
    perstep = read_result(perstep_result)
    scale = perstep["param_scale"]
    x = fixtures.load(fixture)["x"]
    split_rows, diagnosis_rows = float64_tables(readers, job["model"], x, job["diagnosis"])
    out = outputs["split"]
    split_from = {k: v for k, v in made_from.items() if k != "perstep"}
    failed = maths.failures(list(readers.values()))
    figure = [out["png"], out["svg"]]
    _, split = _split(
        job,
        split_rows,
        split_from,
        out["csv"],
        out["md"],
        out["result"],
        code,
        failed,
        figure,
        scale,
    )
    log.info("%s %s split: %s", comp.experiment, comp.tag, split["worst"])
    out = outputs["diagnosis"]
    _, diagnosis = _diagnosis(
        job,
        diagnosis_rows,
        perstep,
        made_from,
        out["csv"],
        out["md"],
        out["result"],
        code,
        [out["png"], out["svg"]],
    )
    log.info("%s %s diagnosis: %s", comp.experiment, comp.tag, diagnosis)
    return {"split": split, "diagnosis": diagnosis}


#: What a comparison job writes for its per-step table, by the rule's output names; with
#: float64 runs also ``split_<name>`` and ``diagnosis_<name>`` of :data:`FLOAT64_OUTPUTS`.
PERSTEP_OUTPUTS = ("csv", "md", "result", "png", "svg")


def compare(
    job: Mapping,
    traces: Mapping[str, str],
    fixture: str,
    outputs: Mapping[str, str],
    log: logging.Logger,
    code: str | None = None,
) -> dict[str, dict]:
    """The job of one comparison (rules ``compare`` and ``perstep``): the per-step table
    (:func:`perstep_job`), and where ``outputs`` name the float64 tables (``split_csv``
    and the others of :data:`FLOAT64_OUTPUTS`, rule ``compare``) the float64 split and the
    diagnosis (:func:`float64_job`), which read the per-step result just written.

    ``job`` is what the rule resolved (``Plan.comparison_job``); ``traces`` the trace of
    each role (``ref32``, ``cand32``; with float64 runs ``ref64``, ``cand64``); ``fixture``
    the experiment's fixture; ``outputs`` the rule's outputs by name (:data:`PERSTEP_OUTPUTS`,
    then ``split_*`` and ``diagnosis_*``); ``code`` the rule's code hash. Returns each
    table's result by kind (``perstep``, ``split``, ``diagnosis``). Raises like
    :func:`perstep_job`; nothing of a table is written when its traces cannot be trusted.
    """
    results = {
        "perstep": perstep_job(
            job,
            traces["ref32"],
            traces["cand32"],
            fixture,
            outputs["csv"],
            outputs["md"],
            outputs["result"],
            log,
            code=code,
            figure=[outputs["png"], outputs["svg"]],
        )
    }
    if "split_csv" in outputs:
        float64 = {
            kind: {out: outputs[f"{kind}_{out}"] for out in FLOAT64_OUTPUTS}
            for kind in ("split", "diagnosis")
        }
        roles = {k: traces[k] for k in SPLIT_ROLES}
        results.update(float64_job(job, roles, fixture, outputs["result"], float64, log, code=code))
    return results
