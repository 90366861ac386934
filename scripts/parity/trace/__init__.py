"""Traces and what they are made from: the Parquet trace schema, the frame
stream of the Rust runners, fixtures and provenance.

Docstring only: a module of this package loads it first, so an import here
would widen every module's code hash (parity.core.codeversion)."""
