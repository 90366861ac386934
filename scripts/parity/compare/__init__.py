"""Comparing runs: closeness and verdicts, the comparison maths (per-step,
split, diagnosis) and the comparison job.

Docstring only: a module of this package loads it first, so an import here
would widen every module's code hash (parity.core.codeversion)."""
