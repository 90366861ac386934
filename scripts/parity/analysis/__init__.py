"""Analysis tools run by hand or by tests, not by a rule.

Docstring only: a module of this package loads it first, so an import here
would widen every module's code hash (parity.core.codeversion)."""
