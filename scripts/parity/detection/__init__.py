"""Detection power: which criterion flags each fault, and the learning-rate
sensitivity search.

Docstring only: a module of this package loads it first, so an import here
would widen every module's code hash (parity.core.codeversion)."""
