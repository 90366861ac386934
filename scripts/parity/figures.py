"""Figures: one line per table column against the step, log-scale y.

Every figure uses the same colour for the same kind of line (:data:`COLOURS`), marks the
tolerance (dashed) and the float32 rounding level — one float32 ULP at the largest
parameter magnitude — (dash-dotted), and is written as PNG and SVG. Zeros cannot sit on a
log axis; they are drawn as gaps and counted in the legend.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.ticker import MaxNLocator

from .fileio import atomic_path

#: One colour per kind of line, the same in every figure.
COLOURS = {
    "max_dparam": "#1f77b4",  # reference f32 vs candidate f32
    "dloss": "#8c8c8c",  # loss difference
    "torch_f64": "#ff7f0e",  # reference f32 vs its own f64 run
    "candle_f64": "#2ca02c",  # candidate f32 vs its own f64 run
    "f64_f64": "#d62728",  # reference f64 vs candidate f64
    "f64_threshold": "#9467bd",  # what float64 rounding alone explains
    "rmse": "#17becf",  # RMSE of the f32 pair
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
