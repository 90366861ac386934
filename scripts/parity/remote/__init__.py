"""Remote hosts: the SSH fetch job and the cross-host tables.

Docstring only: a module of this package loads it first, so an import here
would widen every module's code hash (parity.core.codeversion)."""
