"""The localisation job of one comparison: skip it, or localise it (:mod:`parity.localise.replay`),
and write its table (CSV, Markdown, HTML), figure and sealed result.

Most comparisons pass, as expected, and are localised only with config ``localise.all``
(:func:`skip_reason`). Such a job only writes "skipped", so this module is cheap to import:
the replay machinery (torch, the Rust runners, safetensors), the localisation walk (and with
it pyarrow) and matplotlib are imported only when a comparison is localised, and the
skipped job's figure is written without matplotlib (:func:`write_skipped_figure`); what
that saves is measured in docs/performance.md.
"""

from __future__ import annotations

import base64
import html
import logging
import math
import tempfile
import traceback
from collections.abc import Mapping
from typing import Any

from parity.core import integrity
from parity.core.config import canonical_hash
from parity.core.fileio import atomic_path, write_text_atomic
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
        "reason": reason,
        "notes": [],
        "rows": [],
    }


def _localise(job: Mapping, log: logging.Logger, log_path: str | None) -> dict:
    """The replays and the walk (:func:`parity.localise.replay.localise_comparison`); a comparison
    that cannot be replayed gets status ``not localised`` and the reason, not an error."""
    from parity.localise import replay

    with tempfile.TemporaryDirectory(prefix="parity-localise-") as tmp:
        try:
            return {"status": LOCALISED, **replay.localise_comparison(job, tmp, log, log_path)}
        except (replay.ReplayError, KeyError, ValueError, RuntimeError, OSError) as e:
            log.error("cannot localise: %s\n%s", e, traceback.format_exc())
            return _unlocalised(NOT_LOCALISED, str(e).strip())


def _markdown(comp: Comparison, result: Mapping) -> str:
    title = f"{comp.experiment}: localising {comp.name} on {comp.device}"
    lines = [f"# {title}", ""]
    lines.append(f"- reference: {comp.reference.label}; candidate: {comp.candidate.label}")
    if result["status"] == LOCALISED:
        lines.append(f"- replayed step {result['step']} ({result['step_reason']})")
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


def _figure(paths_out, comp: Comparison, result: Mapping) -> None:
    if result["status"] == SKIPPED:
        write_skipped_figure(paths_out, comp, result["reason"])
        return
    from parity.render import figures

    figures.plot_localisation(
        paths_out,
        result["rows"],
        f"{comp.experiment}: {comp.name} on {comp.device}, step {result.get('step')}",
        result.get("culprit"),
    )


def localise(
    params: Mapping,
    perstep_result: str,
    diagnosis_result: str | None,
    outputs: Mapping[str, str],
    log: logging.Logger,
    log_path: str | None,
    code: str | None = None,
) -> dict:
    """The ``localise`` rule's job: the result, its table (CSV, Markdown, HTML) and figure.

    ``params`` is ``Plan.comparison_job``; ``perstep_result`` (and ``diagnosis_result``, or
    None without float64 runs) the comparison jobs' sealed results; ``outputs`` has
    ``csv``, ``md``, ``result``, ``png``, ``svg``. A comparison that cannot be replayed
    gets status ``not localised`` and the reason, not an error.
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
    result = _unlocalised(SKIPPED, reason) if reason else _localise(job, log, log_path)
    tables.write_csv(outputs["csv"], result["rows"], tables.LOCALISE_COLUMNS)
    tables.write_twins(outputs["md"], _markdown(comp, result))
    _figure([outputs["png"], outputs["svg"]], comp, result)
    html_path = str(outputs["md"]).rsplit(".", 1)[0] + ".html"
    written = {
        "csv": outputs["csv"],
        "md": outputs["md"],
        "html": html_path,
        "png": outputs["png"],
        "svg": outputs["svg"],
    }
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


# ----- the figure of a skipped localisation, without matplotlib ----------------------------


def write_skipped_figure(paths_out, comp: Comparison, reason: str) -> None:
    """The figure of a skipped localisation: an SVG written as text, naming the comparison
    and the reason, and a PNG that says it was skipped (:data:`SKIPPED_PNG`). Each of
    ``paths_out`` is written in the format its suffix names (``.png``, ``.svg``).

    Drawing these with matplotlib cost the skipped job 1.8 s of imports for a figure with
    nothing on it. Writing a PNG needs a rasteriser, so the PNG is one committed picture,
    the same for every skipped comparison (the report labels each with its comparison),
    embedded here so the code hash covers it; the SVG, being text, names the comparison.
    """
    title = f"{comp.experiment}: {comp.name} on {comp.device}: skipped, not localised"
    svg = (
        '<?xml version="1.0" encoding="utf-8"?>\n'
        '<svg xmlns="http://www.w3.org/2000/svg" width="640" height="90" viewBox="0 0 640 90">\n'
        '<rect width="640" height="90" fill="#ffffff"/>\n'
        '<text x="20" y="34" font-family="sans-serif" font-size="15" fill="#000000">'
        f"{html.escape(title)}</text>\n"
        '<text x="20" y="64" font-family="sans-serif" font-size="13" fill="#5a5a5a">'
        f"{html.escape(reason)}</text>\n"
        "</svg>\n"
    )
    for path in paths_out:
        if str(path).endswith(".svg"):
            write_text_atomic(path, svg)
        else:
            with atomic_path(path) as tmp:
                tmp.write_bytes(SKIPPED_PNG)


#: The PNG of a skipped localisation (640 × 90, four grey levels, 1.8 kB): "Skipped: the
#: comparison passed, as expected; not localised. Set localise.all: true to localise every
#: comparison." Made once with Pillow (matplotlib's own dependency), not at run time:
#:   d = ImageDraw.Draw(im := Image.new("L", (640, 90), 255)); f = ImageFont.load_default(16)
#:   d.text((20, 18), line1, fill=0, font=f); d.text((20, 50), line2, fill=90, font=f)
#:   im.quantize(4).save(out, "PNG", optimize=True)
SKIPPED_PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAoAAAABaAgMAAABVmQ/QAAAADFBMVEX////j4+OXl5c5OTn9yf4gAAAGnUlEQVR4"
    "2u2ZXWwU1xmGn7Oz7LTeMLNSSQRdWKPUlBsTlEiIFWzKrGivQPFWilxTRfaSBqkUxbZ64faidMeY0laoiaXUbiVa"
    "FVVEiVQnbBGoDiX2cTG0vbGWn+BFpu2IOMWVk2bsesFez+7pxZo/BZIam7aR5rmZOXO+8+67c47ON98M+Pj4+Pj4"
    "+Pj4+Pj4+Hz6MVh667wWiH80RLPuMS4g7yOYva08d1x6W30eBAAIz4C487Jzr1jrP9R07vrjtxAPdOcqBr/QBpOf"
    "FFqyFzZJkwswWPULSx8y+u3xaaGsjIxrKwMloSyhrIyzeaasHXXCJeNf7WUyzqYSm8r05zJ2xq6e0j0IqGQZoeoC"
    "F446ekmorSv1klA4Rr+VcZ6UCGVXT4VLGHpF/UFsJsQzpmEO50p79eGBghcXo1ta9GGpD58r9H4p86uthalYk3mh"
    "Y6S90LulhS1Nyffc6851Z+/3qpsk+s9Oj9j68B9/2FGYqm7Sh8+NVjfpw65jjgwUemOWoV9y9u6NNRmG2awPDxS8"
    "BzG4vtN42jBxXdMUF2QCnIRpipwp3s2tS1TrHTJRGza1jn0duXUJk4T2B5l1DjuH3VUJTRIOnN5nm+L83zSZSOh1"
    "wnESeh0upnY6t87AMK3jbqw2bBhG1Zz6/Kc4/yK/q7SViuACeEpFUK3uhPehB7xzRMHztjuBB5S/bq1Ir0i7Eygo"
    "7OZ5WykjBniepVrxPAsJCncCQA5y7Z0jIA7cUp+vwZnHk++jkK4nFBLAQygUWekCSDeWgvKIJV0PPCXeoy3Xlqt2"
    "PUD/aXnEEooM0tU9RRbdU4AC6QIK6c7GUnDjxZvq8zaYGrPygEWQ+lYrUumqbxUw14jEHgG13a40ReCcfGX1K6uv"
    "fy0o4DNb1Xab+tZ2iJTrB4By/UBlT7IigMCKEHsEik/doT4/g99E/QABEei5tZn02AgnYlZ2wNkg6BuJmEAQssmh"
    "gSE5+ycANaBvhJ59V7FQxxAO6ticxNzoBLHZIKy6cof6/AweaJDnLYadpc3T3f/cIOMsg+lud/rSX9ccBNjQuyQN"
    "Xld5zUFAe86uV2u2rLF+3PTucyaiwetiurvwur2h92pD7yVn2dWG3mFyUF5zUFhiurv2J41L0oLJZ+fU50+0ZOhD"
    "hrI+nAooq78nzql4OKCsgLIyTtzQOvpz1bPPaO3KyjjxMJtLQh3P5DK59VPh4hB6+ZyyAqoucKE/Fy4FlHUqXAqU"
    "j0kjIDNOWJrtyl4/VT1b95JemlN/4HR87wwH2t0Tc9cvrLtPmLbAvHP3FC8A9ZCfYhZs8OJDytw+Pj4+Pj4+Pj4+"
    "nz5uliRO583qI/6RsqVy/OzHC9Us9iN/1Rj3rZice7z1+y8y937w23dfbf2kYTc+vvvKYhsMv5Hs01ZCdEz0WS2d"
    "OM121CE6CjXayk1DAdliaytDRRB9dnQ0NIMRGhN9iL4qsi32+OEw0dFQUXvzYOemt2jpHI9HD4eK2m/sRTPoFs/m"
    "vz8GjQdC+WRbBDamG39E436gPBa0EW2ry2PLd9qE8unG/ct3QrAtlLdD+XYm2lYbFxWN+5fvtOONNfw62RYxMPLL"
    "d9rF9KIZDL2s7anzYOMvt+756qEIbJZrT7B2EK4orygRhy4qz3gtRfBbF9eeqPotBHu0PSltz/bkk4cuXhv8HGtP"
    "GK+lDt0YLL+ePBS5hpk1XkuN5BbNYH53pQB3PVRzF5BP47LLuh0nwVOgkFy7nIJSGwrUbDKLxA3DNU+hkKhyF3A9"
    "76nFXIPFx7+iIoDlfZmBV4Hv2E0T7L5lUGQGIaIiBBm0vM+n4MZ3l6jIEmVaIjNIASwvoiIAJF8F/uLcbC6OwdT7"
    "W+rTgAxKxFngfPrv9Tx1e5F3N4ArXDwSsDQN5S+q+rSqb3pUdjfwwXYq3QADZ4HCz282F8dgDV5PCogEPXEOEC/n"
    "fn/mju8ianwZBAUILLkqAqz4wOtJeT2pC/3jy6AWuSpY+Q4iBMALx4NiMaf4rWff7nKD8OdvvN119DEL9ah7ua7m"
    "TCfUEKTUoHYlCE7uyOJ1117eNvECTNSVutxSl5tTuxKUXC5vm9yRBUIN/Y9ZcCYxuSMLnYu1G1b9Q5zkFL3RMXEy"
    "2Xe812npjB6uaXnjiSdqOBUPFGWzzalQkXB7nx09Eh3f9lJoRpxEnORpmm0nIIkeCRU124lvmhF9x514dDRU1Oxs"
    "J/8fBG4v1vjDSXULZIV82Ll4gcQkPj4+Pj4+Pj4+Pj4+Pv8L/g1Fy7qNolU4XgAAAABJRU5ErkJggg=="
)
