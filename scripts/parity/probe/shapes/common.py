"""What every shape rule of the probe language shares: the two kinds of tensor
(``"float"``, the run's dtype, and ``"int64"``), the errors (:class:`ShapeError` for one op,
:class:`CaseShapeError` for a step or loss term of a case), signed dimensions
(:func:`dim_index`) and the checks the op families' rules are written with. The rules are
``shapes.layout``, ``shapes.conv``, ``shapes.dense`` and ``shapes.index``; the table that
runs them is ``shapes.table``. Pure Python.
"""

from __future__ import annotations

from collections.abc import Sequence

FLOAT, INT64 = "float", "int64"
KINDS = (FLOAT, INT64)

Shape = list[int]


class ShapeError(ValueError):
    """The inputs or arguments of one op do not fit; the message says why, in PyTorch's
    terms."""


class CaseShapeError(ValueError):
    """A case whose steps or loss do not fit: ``field`` is relative to the case
    (``steps[2].conv1d``, ``loss[0].weighted_sum``), ``problem`` the reason."""

    def __init__(self, field: str, problem: str):
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


def dim_index(d: int, rank: int, what: str = "dim") -> int:
    """A signed dimension as an index below ``rank`` (a scalar takes −1 and 0, as in
    PyTorch). Raises :class:`ShapeError` when it is out of range."""
    r = max(rank, 1)
    if not -r <= d < r:
        raise ShapeError(
            f"{what} {d} is out of range for a tensor of rank {rank} (expected {-r} … {r - 1})"
        )
    return d + r if d < 0 else d


def check_rank(shape: Shape, want: int, what: str) -> None:
    """Refuse a ``shape`` whose rank is not ``want``: :class:`ShapeError` naming ``what``."""
    if len(shape) != want:
        raise ShapeError(f"{what} must have rank {want}, got shape {list(shape)}")


def check_equal(op: str, a: Shape, b: Shape, what: str = "shapes") -> None:
    """Refuse unequal shapes ``a`` and ``b`` (the ``what`` of ``op``): :class:`ShapeError`,
    as the probe language has no implicit broadcasting."""
    if list(a) != list(b):
        raise ShapeError(
            f"{op} needs equal {what} (no implicit broadcasting; use broadcast_to): "
            f"{list(a)} and {list(b)}"
        )


def check_index_values(what: str, values: Sequence[float] | None, size: int) -> None:
    """Refuse index ``values`` (flat, when known; None: not known) outside 0 … ``size`` − 1:
    :class:`ShapeError` naming ``what`` and the first value out of range."""
    if values is None:
        return
    bad = [v for v in values if not 0 <= v < size]
    if bad:
        raise ShapeError(f"{what} {bad[0]:g} is out of range: expected 0 … {size - 1}")
