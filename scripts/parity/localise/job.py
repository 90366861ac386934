"""The localisation job of one comparison: skip it, or localise it (:mod:`parity.localise.replay`),
and write its table (Markdown, HTML; the CSV and the figure when it has rows) and its sealed
result.

Most comparisons pass, as expected, and are localised only with config ``localise.all``
(:func:`skip_reason`). Such a job only writes "skipped", so this module is cheap to import:
the replay machinery (torch, the Rust runners, safetensors), the localisation walk (and with
it pyarrow) and matplotlib are imported only when a comparison is localised.

Only a localised comparison has rows, so only it has a CSV and a figure (PNG and SVG,
:func:`_figure`): a skipped or unreplayable one has nothing to tabulate or draw, and its
Markdown and HTML say why. The CSV and the figure are therefore not declared outputs of the
rule (Snakemake wants every declared output of every job); the job records them in its
sealed result beside its Markdown and HTML, which ``check`` verifies, and embeds the PNG
in the HTML table, the report's item, so the report still shows the figure.
"""

from __future__ import annotations

import base64
import contextlib
import logging
import math
import os
import tempfile
import traceback
from collections.abc import Mapping
from typing import Any

from parity.core import integrity
from parity.core.config import canonical_hash
from parity.core.fileio import write_text_atomic
from parity.plan.keys import Comparison
from parity.render import tables

#: Statuses of a localisation result.
LOCALISED, SKIPPED, NOT_LOCALISED = "localised", "skipped", "not localised"


def skip_reason(perstep: Mapping, comp: Comparison, localise_all: bool) -> str | None:
    """Why a comparison is not localised (a run of it failed, which a replay would only
    repeat; or it passed, as expected, and ``localise.all`` is off), or None when it is."""
    failed = perstep.get("failed_runs") or []
    if failed:
        return "a run failed: " + "; ".join(f["message"] for f in failed)
    if localise_all or comp.expect == "fail" or perstep.get("verdict") != "pass":
        return None
    return "passed; set localise.all: true to localise every comparison"


def _unlocalised(status: str, reason: str) -> dict:
    """The result of a comparison that was not localised (``status`` skipped or not
    localised), with the reason."""
    return {
        "status": status,
        "step": None,
        "step_reason": "",
        "culprit": None,
        "culprit_phase": None,
        "method": None,
        "reason": reason,
        "notes": [],
        "rows": [],
    }


def scalar_culprit(perstep: Mapping) -> dict | None:
    """A localisation that needs no replay: the training loop's first scalar that differs
    beyond rounding (the comparison's ``scalar_first``: a learning rate of a group, the
    gradient norm, the clip coefficient), when it differs no later than the parameters
    first leave the tolerance. Named before any tensor, as ``loop:<scalar>``
    (``loop:lr[group 0]``, ``loop:grad_norm``, ``loop:clip_coef``): the loop computed its step
    with another number. None otherwise."""
    first = perstep.get("scalar_first")
    beyond = perstep.get("tol_exceeded_step")
    if not first or (beyond is not None and first["step"] > beyond):
        return None
    a, b = first["a"], first["b"]
    diff = None if a is None or b is None else abs(a - b)
    row = {
        "order": 1,
        "phase": "loop",
        "quantity": f"loop:{first['scalar']}",
        "shape": "[]",
        "max_abs_diff": diff,
        "where": "",
        "ulp": None,
        "fp64_ratio": None,
        "f64_f64": None,
        "f64_threshold": None,
        "verdict": "differs",
        "note": f"reference {a}, candidate {b}",
    }
    return {
        "status": LOCALISED,
        "step": first["step"],
        "step_reason": "the first step a scalar of the training loop differs",
        "culprit": f"loop:{first['scalar']}",
        "culprit_phase": "loop",
        "method": "traces",
        "reason": "",
        "notes": ["named from the traces' loop scalars (docs/loop.md), before any tensor"],
        "rows": [row],
    }


def update_culprit(perstep: Mapping, loc: Mapping, reference: str) -> dict | None:
    """A localisation that needs no replay, for a run with a training loop whose scalars
    agree (:func:`scalar_culprit` found none): the update of the parameters that first leave
    the tolerance (the comparison's ``tol_exceeded_params``), named by the reference's
    parameter group when the run has several and they are all of one (``update:group 1``),
    else by the parameters (``update:fc1.bias,fc2.weight``): the optimizer computed their step
    otherwise. None for a run that can be replayed (no ``loop_groups``), or when no parameter
    leaves the tolerance."""
    groups = loc.get("loop_groups", {}).get(reference)
    params = perstep.get("tol_exceeded_params")
    step = perstep.get("tol_exceeded_step")
    if not groups or not params or step is None:
        return None
    owner = {p: i for i, g in enumerate(groups) for p in g}
    of = {owner.get(p) for p in params}
    named = ", ".join(params)
    if len(groups) > 1 and len(of) == 1:
        culprit = f"update:group {of.pop()}"
    else:
        culprit = f"update:{','.join(params)}"
    row = {
        "order": 1,
        "phase": "update",
        "quantity": culprit,
        "shape": "",
        "max_abs_diff": perstep.get("worst_dparam"),
        "where": perstep.get("tol_exceeded_where") or "",
        "ulp": None,
        "fp64_ratio": None,
        "f64_f64": None,
        "f64_threshold": None,
        "verdict": "differs",
        "note": f"parameters beyond the tolerance at step {step}: {named}",
    }
    return {
        "status": LOCALISED,
        "step": step,
        "step_reason": "first step beyond the tolerance, the loop's scalars agreeing",
        "culprit": culprit,
        "culprit_phase": "update",
        "method": "traces",
        "reason": "",
        "notes": [
            (
                "named from the traces (docs/loop.md): the loop's scalars agree at that step, "
                "the parameters after the update do not"
            )
        ],
        "rows": [row],
    }


def _localise(job: Mapping, log: logging.Logger, log_path: str | None) -> dict:
    """The replays and the walk (:func:`parity.localise.replay.localise_comparison`); a comparison
    that cannot be replayed gets status ``not localised`` and the reason, not an error."""
    from parity.localise import replay

    with tempfile.TemporaryDirectory(prefix="parity-localise-") as tmp:
        try:
            found = replay.localise_comparison(job, tmp, log, log_path)
            return {"status": LOCALISED, "method": "replay", **found}
        except (replay.ReplayError, KeyError, ValueError, RuntimeError, OSError) as e:
            log.error("cannot localise: %s\n%s", e, traceback.format_exc())
            return _unlocalised(NOT_LOCALISED, str(e).strip())


def _markdown(comp: Comparison, result: Mapping) -> str:
    title = f"{comp.experiment}: localising {comp.name} on {comp.device}"
    lines = [f"# {title}", ""]
    lines.append(f"- reference: {comp.reference.label}; candidate: {comp.candidate.label}")
    if result["status"] == LOCALISED:
        # a culprit of the loop or of a group's update may be read off the traces, unreplayed
        verb = "named at" if result["method"] == "traces" else "replayed"
        lines.append(f"- {verb} step {result['step']} ({result['step_reason']})")
        culprit = result["culprit"]
        lines.append(
            f"- culprit: **`{culprit}`** ({result['culprit_phase']})"
            if culprit
            else "- culprit: none (every quantity agrees within rounding)"
        )
    else:
        lines.append(f"- {result['status']}: {result['reason']}")
    lines += [f"- {n}" for n in result["notes"]]
    lines.append("")
    if result["rows"]:
        fmt = {c: tables.sci for c in ("max_abs_diff", "f64_f64", "f64_threshold")}
        fmt["fp64_ratio"] = lambda v: "" if v is None else f"{v:.3g}"
        fmt["ulp"] = lambda v: "" if v is None else f"{v:g}"
        lines.append(tables.markdown_table(result["rows"], tables.LOCALISE_COLUMNS, fmt))
    return "\n".join(lines) + "\n"


def _remove(paths_out) -> None:
    """Remove what an earlier run of this job left at ``paths_out`` (a figure or CSV that
    would show a culprit the table no longer names); absent files are fine."""
    for path in paths_out:
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)


def _figure(paths_out, comp: Comparison, result: Mapping) -> list[str]:
    """Draw the figure of a localised comparison at ``paths_out`` (PNG, SVG) and return
    them; a skipped or unreplayable one has none (:func:`_remove`, and ``[]``)."""
    if result["status"] != LOCALISED:
        _remove(paths_out)
        return []
    from parity.render import figures

    figures.plot_localisation(
        paths_out,
        result["rows"],
        f"{comp.experiment}: {comp.name} on {comp.device}, step {result.get('step')}",
        result.get("culprit"),
    )
    return list(paths_out)


def _html(md_text: str, png: str | None) -> str:
    """The HTML table (the report's item) of Markdown ``md_text``, with the PNG at
    ``png`` embedded under it (a data URI) when the comparison has a figure."""
    page = tables.markdown_to_html(md_text)
    if png is None:
        return page
    with open(png, "rb") as f:
        data = base64.b64encode(f.read()).decode("ascii")
    img = f'<p><img alt="localisation figure" src="data:image/png;base64,{data}"></p>'
    return page.replace("</body>", img + "</body>", 1)


def localise(
    params: Mapping,
    perstep_result: str,
    diagnosis_result: str | None,
    outputs: Mapping[str, str],
    log: logging.Logger,
    log_path: str | None,
    code: str | None = None,
) -> dict:
    """The ``localise`` rule's job: the result, its table (Markdown, HTML; CSV) and figure.

    ``params`` is ``Plan.comparison_job``; ``perstep_result`` (and ``diagnosis_result``, or
    None without float64 runs) the comparison jobs' sealed results; ``outputs`` has ``md``
    and ``result`` (the rule's declared outputs) and may name ``csv``, ``png`` and ``svg``
    (default: ``Comparison.table``, ``Comparison.figure``): only a localised comparison
    has rows for a CSV and a figure (:func:`_figure`); a skipped one's Markdown and HTML
    say why. A comparison that cannot be replayed gets status ``not localised`` and the
    reason, not an error. Returns the sealed result as written.
    """
    job = dict(params)
    read = {"perstep": perstep_result, "fixture": params["localise"]["fixture"]}
    if diagnosis_result:
        read["diagnosis"] = diagnosis_result
    made_from = {role: integrity.file_record(p) for role, p in read.items()}
    job["perstep"] = integrity.read_sealed_json(perstep_result)
    if diagnosis_result:
        job["diagnosis_result"] = integrity.read_sealed_json(diagnosis_result)
    comp = Comparison.from_params(job["comparison"])
    reason = skip_reason(job["perstep"], comp, job["localise"]["all"])
    if reason:
        result = _unlocalised(SKIPPED, reason)
    else:
        result = (
            scalar_culprit(job["perstep"])
            or update_culprit(job["perstep"], job["localise"], comp.reference.run)
            or _localise(job, log, log_path)
        )
    csv_path = outputs.get("csv") or comp.table("localise", "csv")
    if result["status"] == LOCALISED:
        tables.write_csv(csv_path, result["rows"], tables.LOCALISE_COLUMNS)
    else:
        _remove([csv_path])
    figure = [outputs.get(e) or comp.figure("localise", e) for e in ("png", "svg")]
    drawn = _figure(figure, comp, result)
    md_text = _markdown(comp, result)
    write_text_atomic(outputs["md"], md_text)
    html_path = str(outputs["md"]).rsplit(".", 1)[0] + ".html"
    write_text_atomic(html_path, _html(md_text, drawn[0] if drawn else None))
    written = {"csv": csv_path} if result["status"] == LOCALISED else {}
    written |= {"md": outputs["md"], "html": html_path}
    written.update(zip(("png", "svg"), drawn, strict=False))
    full = {
        "kind": "localise",
        "experiment": comp.experiment,
        "comparison": comp.name,
        "device": comp.device,
        "reference": comp.reference.label,
        "candidate": comp.candidate.label,
        **{k: v for k, v in result.items() if k != "rows"},
        "sources": made_from,
        "tables": {role: integrity.file_record(p) for role, p in written.items()},
        "job_sha256": canonical_hash(dict(params)),
        "code": code,
    }
    integrity.write_sealed_json(outputs["result"], _json_safe(full))
    log.info(
        "%s %s: %s, culprit %s", comp.experiment, comp.tag, result["status"], result["culprit"]
    )
    return full


def _json_safe(obj: Any) -> Any:
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, Mapping):
        return {k: _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_safe(v) for v in obj]
    return obj
