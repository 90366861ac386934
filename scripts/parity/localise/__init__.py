"""Localisation: the same-state replay of one step and the walk to the first
intermediate that differs.

Docstring only: a module of this package loads it first, so an import here
would widen every module's code hash (parity.core.codeversion)."""
