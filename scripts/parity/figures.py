"""Figures: one line per table column against the step, log-scale y.

Zeros cannot sit on a log axis; they are drawn as gaps and counted in the legend.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from .fileio import atomic_path


def plot_columns(
    path: str,
    rows: Sequence[Mapping],
    columns: Mapping[str, str],
    title: str,
    tolerance: float | None = None,
    ylabel: str = "max |difference|",
    markers: Mapping[str, int | None] | None = None,
) -> None:
    """Plot ``columns`` (CSV column → legend label) of ``rows`` against ``step``.

    Step 0 is left out (it is the initial state). ``tolerance`` draws a dashed line;
    ``markers`` (label → step, None skipped) draw dotted vertical lines. Written atomically
    as PNG.
    """
    rows = [r for r in rows if r["step"] > 0]
    steps = np.array([r["step"] for r in rows])
    fig, ax = plt.subplots(figsize=(7, 4), dpi=120)
    for col, label in columns.items():
        y = np.array([np.nan if r[col] is None else r[col] for r in rows], dtype=float)
        zeros = int(np.sum(y == 0))
        y[y <= 0] = np.nan
        suffix = f" ({zeros} steps exactly 0)" if zeros else ""
        ax.plot(steps, y, marker="." if len(steps) < 40 else None, label=label + suffix)
    if tolerance is not None and tolerance > 0:
        ax.axhline(
            tolerance, color="black", linestyle="--", linewidth=1, label=f"tolerance {tolerance:g}"
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
    ax.set_xlabel("step")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png")
    plt.close(fig)
