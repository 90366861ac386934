"""Snakemake job: a batch of probes (every probe of one dtype and device) with a Rust runner
binary, candle-parity or burn-parity of one release (the rule's param ``release``: the
framework and "" for its primary release, else the version), run ONCE on the whole
batch, each probe's result from the content cache when it holds it (see
parity.probe.batch and parity.probe.rust)."""

from parity.core.fileio import job_start, sha256_file

sm = snakemake  # noqa: F821
# First, before the imports below (torch, numpy, pyarrow): the job's CPU priority.
log = job_start(sm)

from parity.probe import batch as probe_batch
from parity.probe import rust as rust_probe
from parity.probe.format import Probe

w = sm.wildcards
framework, version = sm.params.release
batch = probe_batch.Batch(framework, w.dtype, w.device, version)
probes = [Probe(**p) for p in sm.params.probes]
binary = sm.input.binary
# Before anything reads it (its sha256 keys the cache): the build this checkout and config
# make for the batch's release and device, not another build's binary copied in.
rust_probe.check_binary(binary, sm.params.build)


def compute(todo):
    """The runner binary once on ``todo``."""
    return rust_probe.run_batch(
        todo,
        batch.framework,
        batch.dtype,
        batch.device,
        binary,
        sm.threads,
        log,
        sm.log[0],
        build=sm.params.build,
    )


probe_batch.run_batch(
    probes,
    batch,
    probe_batch.job_outputs(probes, batch, sm.output),
    probe_batch.identity(sm.params.code, sm.threads, binary=sha256_file(binary)),
    compute,
    log,
)
