"""Writing tables (CSV, Markdown, HTML twins) and figures.

Docstring only: a module of this package loads it first, so an import here
would widen every module's code hash (parity.core.codeversion)."""
