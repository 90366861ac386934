"""Snakemake job (rules build_candle, build_burn): `cargo build --release --locked` of one
release of a Rust runner, its binary copied out once it reports this checkout's and this
release's source id (see parity.train.build.build)."""

from parity.core.fileio import job_logger
from parity.train.build import build

sm = snakemake  # noqa: F821
log = job_logger(sm.log[0])
build(sm.params.build, sm.params.crate, sm.input.manifest, sm.output[0], log, sm.log[0])
