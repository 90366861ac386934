"""The report: the summary, check, the framework table, the release matrix
and the report's pages.

Docstring only: a module of this package loads it first, so an import here
would widen every module's code hash (parity.core.codeversion)."""
