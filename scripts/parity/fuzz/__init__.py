"""Differential layout fuzzing (docs/fuzzing.md): random valid op cases whose inputs reach
the op through random layout routes (transposes, offset narrows, stride-0 broadcasts), run
in PyTorch, candle and burn, judged by the float64-referenced rule, shrunk to minimal probe
files. ``generate`` builds cases, ``check`` runs and judges them, ``shrink`` reduces a
failing case, ``campaign`` runs one campaign, ``report`` writes the findings.

Docstring only: a module of this package loads it first, so an import here would widen
every module's code hash (parity.core.codeversion)."""
