"""Shared plumbing every stage stands on: config primitives and checks, YAML
reading, atomic file writes and hashing, integrity seals, result paths, devices, model
families, host naming, and the code hash that makes reruns precise.

Docstring only: a module of this package loads it first, so an import here
would widen every module's code hash (parity.core.codeversion)."""
