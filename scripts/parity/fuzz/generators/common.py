"""What the fuzzer's op generators share (``generators.table``, ``generators.spatial``,
``generators.index``): random sizes and shapes. Every dimension is 1–6 unless a generator
says otherwise. A generator is ``f(rng) → (input shapes, YAML arguments)``, not yet
validated (``generate.out_shape`` decides)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

#: op → f(rng) → (input shapes, YAML arguments).
Generator = Callable[[np.random.Generator], tuple[list[list[int]], dict]]


def d(rng: np.random.Generator, lo: int = 1, hi: int = 6) -> int:
    """A size in ``lo`` … ``hi`` (inclusive)."""
    return int(rng.integers(lo, hi + 1))


def shape(rng: np.random.Generator, lo_rank: int = 1, hi_rank: int = 4) -> list[int]:
    """A shape of rank ``lo_rank`` … ``hi_rank`` with every dimension 1–6."""
    return [d(rng) for _ in range(int(rng.integers(lo_rank, hi_rank + 1)))]


def pick(rng: np.random.Generator, options) -> object:
    """One of ``options`` (a list of plain values), as a plain Python value."""
    return options[int(rng.integers(len(options)))]
