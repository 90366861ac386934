"""Running training: one PyTorch run, one Rust runner run, the optimizer
defaults of each framework, and the build of the Rust runners.

Docstring only: a module of this package loads it first, so an import here
would widen every module's code hash (parity.core.codeversion)."""
