"""Planning: the config resolved into runs, comparisons and the params each job
receives; the framework registry, the version axis and the size limits.

Docstring only: a module of this package loads it first, so an import here
would widen every module's code hash (parity.core.codeversion)."""
