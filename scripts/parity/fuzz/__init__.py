"""Differential layout fuzzing (issue 21): random valid op cases whose inputs reach the op
through random layout routes (transposes, offset narrows, stride-0 broadcasts), run in
PyTorch, candle and burn, judged by the float64-referenced rule, shrunk to minimal probe
files. ``generate`` builds cases, ``check`` runs and judges them, ``shrink`` reduces a
failing case, ``report`` writes the findings."""
