"""Op probes: the probe language, its shapes and limits, the batches, the
PyTorch and Rust interpreters, the results and their table.

Docstring only: a module of this package loads it first, so an import here
would widen every module's code hash (parity.core.codeversion)."""
