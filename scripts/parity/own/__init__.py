"""A user's own model (config ``model: {family: own}``, docs/own-model.md): the PyTorch
module built from a factory or a Hugging Face ``transformers`` class, its model card (the
parameters, tied weights and buffers the plan needs while the DAG is built), its fixture
drawn from the module's own initialisation, the forward hooks that name its intermediates,
and the cargo crate that links the user's Rust port to a runner.

Docstring only: a module of this package loads it first, so an import here would widen
every module's code hash (parity.core.codeversion)."""
