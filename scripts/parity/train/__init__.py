"""Training: one PyTorch run, one Rust runner run, the optimizer defaults of each
framework, the build of the Rust runners and of an own model's runner, and the check of
an own model's Rust port.

Docstring only: a module of this package loads it first, so an import here
would widen every module's code hash (parity.core.codeversion)."""
