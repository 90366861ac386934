"""Figures: one line per table column against the step, log-scale y.

Every figure uses the same colour for the same kind of line (:data:`COLOURS`), marks the
tolerance (dashed) and the float32 rounding level — one float32 ULP at the largest
parameter magnitude — (dash-dotted), and is written as PNG and SVG. Zeros cannot sit on a
log axis; they are drawn as gaps and counted in the legend.

matplotlib is imported when a figure is drawn (:func:`_pyplot`), not with this module: a job
that imports it and draws nothing (a skipped localisation) does not pay its start-up (about
1.8 s here, ``python -X importtime``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from parity.core.fileio import atomic_path


def _pyplot():
    """matplotlib.pyplot on the Agg backend (no display), imported on first use."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


#: One colour per kind of line, the same in every figure.
COLOURS = {
    "max_dparam": "#1f77b4",  # reference f32 vs candidate f32
    "dloss": "#8c8c8c",  # loss difference
    "torch_f64": "#ff7f0e",  # reference f32 vs its own f64 run
    "candle_f64": "#2ca02c",  # candidate f32 vs its own f64 run
    "f64_f64": "#d62728",  # reference f64 vs candidate f64
    "f64_threshold": "#9467bd",  # what float64 rounding alone explains
    "rmse": "#17becf",  # RMSE of the f32 pair
    "dlr": "#e377c2",  # the loop's learning rates (largest over the groups)
    "dgrad_norm": "#bcbd22",  # the loop's gradient norm before clipping
    "dclip_coef": "#7f7f7f",  # the loop's clip coefficient
}


def ulp32(magnitude: float) -> float:
    """Spacing of float32 numbers at ``magnitude`` (one unit in the last place)."""
    return float(np.spacing(np.float32(abs(magnitude))))


def plot_columns(
    paths: Sequence[str],
    rows: Sequence[Mapping],
    columns: Mapping[str, str],
    title: str,
    tolerance: float | None = None,
    ylabel: str = "max |difference|",
    markers: Mapping[str, int | None] | None = None,
    rounding_level: float | None = None,
) -> None:
    """Plot ``columns`` (CSV column → legend label) of ``rows`` against ``step``.

    Step 0 is left out (the initial state). ``tolerance`` draws a dashed line,
    ``rounding_level`` a dash-dotted one, ``markers`` (label → step, None skipped) dotted
    vertical lines. Each of ``paths`` is written atomically in the format its suffix names
    (``.png``, ``.svg``).
    """
    plt = _pyplot()
    from matplotlib.ticker import MaxNLocator

    rows = [r for r in rows if r["step"] > 0]
    steps = np.array([r["step"] for r in rows])
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=120)
    for col, label in columns.items():
        y = np.array([np.nan if r[col] is None else r[col] for r in rows], dtype=float)
        zeros = int(np.sum(y == 0))
        y[y <= 0] = np.nan
        suffix = f" ({zeros} step{'s' if zeros > 1 else ''} exactly 0)" if zeros else ""
        ax.plot(
            steps,
            y,
            color=COLOURS.get(col),
            marker="." if len(steps) < 40 else None,
            linewidth=1.6,
            label=label + suffix,
        )
    if tolerance is not None and tolerance > 0:
        ax.axhline(
            tolerance, color="black", linestyle="--", linewidth=1, label=f"tolerance {tolerance:g}"
        )
    if rounding_level:
        ax.axhline(
            rounding_level,
            color="#555555",
            linestyle="-.",
            linewidth=1,
            label=f"1 float32 ULP at max|θ| ({rounding_level:.2e})",
        )
    for i, (label, step) in enumerate((markers or {}).items()):
        if step is not None:
            ax.axvline(
                step,
                color=f"C{i + 5}",
                linestyle=":",
                linewidth=1.5,
                label=f"{label} (step {step})",
            )
    ax.set_yscale("log")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("step", fontsize=11)
    ax.set_ylabel(ylabel, fontsize=11)
    ax.set_title(title, fontsize=12)
    ax.tick_params(labelsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="best", framealpha=0.85)
    fig.tight_layout()
    for path in paths:
        with atomic_path(path) as tmp:
            fig.savefig(tmp, format=str(path).rsplit(".", 1)[-1])
    plt.close(fig)


#: The lines of a comparison's figure, by table kind: table column → legend label.
COMPARISON_COLUMNS = {
    "perstep": {"max_dparam": "max|ref32 − cand32|", "dloss": "|dloss|"},
    "split": {
        "max_dparam": "max|ref32 − cand32|",
        "torch_f64": "max|ref32 − ref64|",
        "candle_f64": "max|cand32 − cand64|",
        "f64_f64": "max|ref64 − cand64|",
    },
    "diagnosis": {
        "max_dparam": "max|ref32 − cand32|",
        "f64_f64": "max|ref64 − cand64|",
        "f64_threshold": "float64 rounding threshold",
        "rmse": "RMSE(ref32 − cand32)",
    },
}


#: The lines of a run with a training loop (docs/loop.md; ``maths.LOOP_DIFFERENCES``), drawn
#: where a row has them.
LOOP_FIGURE_COLUMNS = {
    "dlr": "|dlr| (largest over the groups)",
    "dgrad_norm": "|dgrad_norm| (before clipping)",
    "dclip_coef": "|dclip_coef|",
}


def comparison_figure(
    kind: str,
    rows: Sequence[Mapping],
    paths: Sequence[str],
    title: str,
    tolerance: float,
    param_scale: float | None,
    perstep: Mapping | None = None,
    diagnosis: Mapping | None = None,
) -> None:
    """The figure of one comparison table (``kind``: perstep, split, diagnosis), drawn by
    the job that computed its ``rows``: the lines of :data:`COMPARISON_COLUMNS`, the
    tolerance, the float32 rounding level at ``param_scale`` (the per-step result's largest
    parameter magnitude) and, for a diagnosis, dotted lines at the first step beyond the
    tolerance (``perstep``, the per-step result), where float64 leaves rounding and the
    first ReLU flip (``diagnosis``, its findings); the per-step and diagnosis figures of runs
    with a training loop also draw the differences of the loop's scalars
    (:data:`LOOP_FIGURE_COLUMNS`, those a row has). Writes each of ``paths``."""
    columns = dict(COMPARISON_COLUMNS[kind])
    if kind in ("perstep", "diagnosis"):
        columns.update(
            {
                c: label
                for c, label in LOOP_FIGURE_COLUMNS.items()
                if any(r.get(c) is not None for r in rows)
            }
        )
    markers = {}
    if kind == "diagnosis":
        markers = {
            "f32 exceeds tolerance": perstep["tol_exceeded_step"],
            "f64 leaves rounding": diagnosis["f64_divergence_step"],
            f"ReLU flip {diagnosis['relu_flip_unit']}": diagnosis["relu_flip_step"],
        }
    plot_columns(
        paths,
        rows,
        columns,
        title,
        tolerance,
        markers=markers,
        rounding_level=ulp32(param_scale) if param_scale else None,
    )


# ----- detection power (README, "Detection power") -------------------------------------

#: Bar colours of the detection figure.
DETECTION_COLOURS = {
    "max_abs": "#d62728",  # a fault the tolerance detects
    "f64 only": "#ff7f0e",  # a fault only the float64 criteria detect
    "undetected": "#8c8c8c",  # a fault no criterion detects
    "correct": "#1f77b4",  # a correct pair, not flagged
    "false alarm": "#9467bd",  # a correct pair some criterion flags
}


def _save(fig, paths: Sequence[str]) -> None:
    for path in paths:
        with atomic_path(path) as tmp:
            fig.savefig(tmp, format=str(path).rsplit(".", 1)[-1])
    _pyplot().close(fig)


def plot_detection(
    paths: Sequence[str],
    faults: Sequence[Mapping],
    correct: Sequence[Mapping],
    tolerance: float,
) -> None:
    """Worst max|dparam| of every fault instance and every correct pair, one horizontal
    bar each on a log axis, the tolerance dashed. Bars are coloured by what detects them
    (:data:`DETECTION_COLOURS`); a missing or non-finite worst (a run that diverged: its
    difference is ``inf``, stored as null) is drawn to the right edge and labelled, an
    exact 0 (bit-identical runs) as a mark at the left edge.

    ``faults`` are rows of ``detection.DETECTION_COLUMNS``, ``correct`` rows of
    ``detection.FALSE_ALARM_COLUMNS``. Writes each of ``paths`` (``.png``, ``.svg``).
    """
    plt = _pyplot()
    items = []
    for r in faults:
        by = r["detected_by"].split(", ") if r["detected_by"] else []
        kind = "max_abs" if "max_abs" in by else "f64 only" if by else "undetected"
        items.append((f"{r['fault']} ({r['experiment']})", r["worst_dparam"], kind))
    for r in correct:
        kind = "false alarm" if r["false_alarm"] == "yes" else "correct"
        items.append((f"{r['experiment']} {r['comparison']}", r["worst_dparam"], kind))
    values = np.array([np.nan if v is None else v for _, v, _ in items], dtype=float)
    finite = values[np.isfinite(values) & (values > 0)]
    lo = min(float(finite.min(initial=tolerance)), tolerance) / 10
    hi = max(float(finite.max(initial=tolerance)), tolerance) * 10
    fig, ax = plt.subplots(figsize=(9, 1.2 + 0.26 * len(items)), dpi=120)
    y = np.arange(len(items))[::-1]
    for yi, (_, v, kind) in zip(y, items, strict=True):
        colour = DETECTION_COLOURS[kind]
        if v is None or not math.isfinite(v):
            ax.barh(yi, hi - lo, left=lo, color=colour, hatch="//", alpha=0.6)
            ax.text(hi, yi, " inf (diverged)", va="center", ha="right", fontsize=8)
        elif v == 0:
            ax.plot([lo], [yi], marker="|", markersize=12, color=colour)
            ax.text(lo, yi, "  0 (bit for bit)", va="center", fontsize=8)
        else:
            ax.barh(yi, v - lo, left=lo, color=colour)
    ax.axvline(tolerance, color="black", linestyle="--", linewidth=1)
    ax.set_xscale("log")
    ax.set_xlim(lo, hi)
    ax.set_yticks(y, [label for label, _, _ in items], fontsize=8)
    if faults and correct:
        ax.axhline(y[len(faults)] + 0.5, color="#555555", linewidth=0.8)
    ax.set_xlabel("worst max|dparam| over all steps", fontsize=11)
    ax.set_title("Detection power: fault instances (top) and correct pairs", fontsize=12)
    handles = [
        plt.Rectangle((0, 0), 1, 1, color=c)
        for k, c in DETECTION_COLOURS.items()
        if any(kind == k for _, _, kind in items)
    ]
    labels = {
        "max_abs": "fault, detected by the tolerance",
        "f64 only": "fault, detected by a float64 criterion only",
        "undetected": "fault, not detected",
        "correct": "correct pair",
        "false alarm": "correct pair flagged (false alarm)",
    }
    names = [labels[k] for k in DETECTION_COLOURS if any(kind == k for _, _, kind in items)]
    tol = plt.Line2D([], [], color="black", linestyle="--", linewidth=1)
    ax.legend([*handles, tol], [*names, f"tolerance {tolerance:g}"], fontsize=8, loc="best")
    ax.grid(True, axis="x", which="both", alpha=0.3)
    fig.tight_layout()
    _save(fig, paths)


def plot_sensitivity(
    paths: Sequence[str],
    trials: Sequence,
    tolerance: float,
    bracket: tuple[float, float] | None,
    title: str,
) -> None:
    """Worst max|dparam| against the relative learning-rate error δ, log-log: one point per
    run (circles: the decade scan, squares: bisection; filled red when detected, open blue
    when not), the tolerance dashed, the clean pair (δ = 0) dotted, the final bracket
    shaded. ``trials`` are ``detection.Trial``; writes each of ``paths``."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=120)
    clean = [t for t in trials if t.delta == 0]
    for phase, marker in (("scan", "o"), ("bisection", "s")):
        for hit in (True, False):
            pts = [t for t in trials if t.phase == phase and t.detected == hit and t.delta > 0]
            if not pts:
                continue
            ax.plot(
                [t.delta for t in pts],
                [t.worst for t in pts],
                linestyle="none",
                marker=marker,
                markersize=7,
                markerfacecolor="#d62728" if hit else "none",
                markeredgecolor="#d62728" if hit else "#1f77b4",
                label=f"{phase}: {'detected' if hit else 'not detected'}",
            )
    ax.axhline(
        tolerance, color="black", linestyle="--", linewidth=1, label=f"tolerance {tolerance:g}"
    )
    if clean and 0 < clean[0].worst < math.inf:
        ax.axhline(
            clean[0].worst,
            color="#555555",
            linestyle=":",
            linewidth=1.2,
            label=f"clean pair, δ = 0 ({clean[0].worst:.2e})",
        )
    if bracket is not None:
        a, b = bracket
        ax.axvspan(
            10.0**a,
            10.0**b,
            color="#2ca02c",
            alpha=0.2,
            label=f"threshold in [{10.0**a:.2e}, {10.0**b:.2e}]",
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("relative learning-rate error δ (lr·(1 + δ))", fontsize=11)
    ax.set_ylabel("worst max|dparam| over all steps", fontsize=11)
    ax.set_title(title, fontsize=12)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="best", framealpha=0.85)
    fig.tight_layout()
    _save(fig, paths)


#: Bar colours of the localisation figure, by verdict.
LOCALISE_COLOURS = {
    "agrees": "#1f77b4",
    "differs": "#d62728",
    "downstream": "#ff7f0e",
    "not recorded": "#8c8c8c",
}


def plot_localisation(
    paths: Sequence[str], rows: Sequence[Mapping], title: str, culprit: str | None
) -> None:
    """One bar per quantity of a localisation (``parity.localise.walk``), in dataflow order: its
    max|ref32 − cand32| on a log axis, coloured by verdict, with max|ref64 − cand64| as a
    black dot; the culprit named and outlined, the phases separated by dotted lines. An
    exact 0 has no bar and is written ``0``; an infinite difference reaches the top. A
    localisation without rows (skipped, or not replayable) draws an empty axis with the
    title."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(max(6.0, 0.32 * len(rows) + 2), 4.8), dpi=120)
    values = [r["max_abs_diff"] for r in rows] + [r["f64_f64"] for r in rows]
    finite = [v for v in values if v is not None and np.isfinite(v) and v > 0]
    floor = min(finite) / 10 if finite else 1e-16
    top = max(finite) * 10 if finite else 1.0
    x = np.arange(len(rows))
    for i, r in enumerate(rows):
        v = r["max_abs_diff"]
        if v is None:
            continue
        h = top if not np.isfinite(v) else v
        colour = LOCALISE_COLOURS.get(r["verdict"], "#8c8c8c")
        if h > 0:
            edge = "black" if r["quantity"] == culprit else colour
            ax.bar(i, h - floor, bottom=floor, color=colour, edgecolor=edge, linewidth=2)
        else:
            ax.text(i, floor * 1.5, "0", ha="center", fontsize=7, color=colour)
        f64 = r["f64_f64"]
        if f64 is not None and f64 > 0:
            ax.plot(i, min(f64, top), "o", color="black", markersize=3)
        if r["quantity"] == culprit:
            ax.annotate(
                f"culprit: {culprit}",
                (i, max(h, floor)),
                textcoords="offset points",
                xytext=(0, 6),
                ha="center",
                fontsize=8,
            )
        if i and r["phase"] != rows[i - 1]["phase"]:
            ax.axvline(i - 0.5, color="#444444", linestyle=":", linewidth=1)
    ax.set_yscale("log")
    ax.set_ylim(floor, top)
    ax.set_xticks(x, [r["quantity"] for r in rows], rotation=70, ha="right", fontsize=7)
    ax.set_ylabel("max |ref32 − cand32| (bars), max |ref64 − cand64| (dots)", fontsize=8)
    ax.set_title(title, fontsize=10)
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in LOCALISE_COLOURS.values()]
    ax.legend(handles, list(LOCALISE_COLOURS), fontsize=7, loc="upper left")
    fig.tight_layout()
    _save(fig, paths)
