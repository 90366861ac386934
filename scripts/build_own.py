"""Snakemake job: build the runner of an own model's Rust port (see parity.train.build_own)."""

import os

from parity.core.fileio import job_logger
from parity.train.build_own import build_own

sm = snakemake  # noqa: F821
log = job_logger(sm.log[0])
rust_dir = os.path.dirname(os.path.abspath(sm.input.manifest))
build_own(sm.params.build, rust_dir, sm.output[0], log, sm.log[0])
