"""Probe batches: one job runs every probe of a (framework, dtype, device) in one process,
and a content cache makes a rerun recompute only the probes that changed.

A probe run costs microseconds; starting its interpreter (importing torch, launching a
runner binary) costs seconds. So the workflow has one job per batch
(``ProbePlan.batches``), whose outputs are still one result file per probe
(``ProbeKey.result``). Snakemake reruns a batch when any of its probe files changes; the
cache keeps that cheap:

* each probe's result is kept under ``paths.PROBE_CACHE``, named by :func:`cache_key`: a
  hash of the normalized probe (``Probe.hash``), the cell (framework, dtype, device) and
  the interpreter's identity (:func:`identity`: the job's code hash, the framework's
  version or the runner binary's sha256, the thread count, the platform and CPU);
* a batch job first looks up every probe; an entry is used only if ``read_results``
  accepts it (page checksums, sealed metadata, the probe's hash, the cell, the rows) and
  its metadata records the same key (:data:`CACHE_KEY_FIELD`), else it is removed and
  recomputed;
* the rest run in ONE call of the framework's ``compute`` (PyTorch in the job's own
  interpreter, the Rust runner once with a ``ProbeBatch``), each result written to the
  cache atomically as it arrives (``results.write_results``), so that a job failing
  half-way keeps what it had computed for the rerun;
* only when every probe has a cache entry are the outputs written, each a copy of its
  entry checked again (``read_results``) before it is renamed into place: a failed job
  leaves no output of its own.

A cache entry written for one probe replaces that probe's older entries of the batch, so the
cache holds one result per probe and cell.
"""

from __future__ import annotations

import hashlib
import json
import logging
import platform
import shutil
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from parity.core import paths
from parity.core.fileio import atomic_path
from parity.probe.format import Probe
from parity.probe.plan import ProbeKey
from parity.probe.results import Outcome, ProbeResultError, read_results, write_results
from parity.trace.provenance import cpu_model

#: Bump to orphan every cache entry (a change of what a key covers).
CACHE_VERSION = 1
#: The result metadata field holding the cache key a result was made under (outputs keep
#: it: it names the probe, cell and interpreter identity the result came from).
CACHE_KEY_FIELD = "cache_key"

#: What a framework's ``compute`` yields per probe: (probe name, its outcomes in the probe's
#: order, the result file's metadata: ``framework_version``, ``host``, ``runner``).
Computed = tuple[str, Sequence[Outcome], Mapping[str, Any]]
#: ``compute(probes)``: runs the probes (all of one batch) in one process and yields one
#: :data:`Computed` per probe, in any order. Raises when the batch cannot run.
Compute = Callable[[list[Probe]], Iterable[Computed]]


class BatchError(RuntimeError):
    """A batch's computation did not deliver exactly the probes it was given."""


@dataclass(frozen=True)
class Batch:
    """One probe job: every probe of one (framework, dtype, device), of a further release
    ``version`` of a Rust framework ("" for the primary one; ``ProbeKey.version``)."""

    framework: str
    dtype: str
    device: str
    version: str = ""

    def key(self, probe: str) -> ProbeKey:
        """The cell of ``probe`` in this batch."""
        return ProbeKey(probe, self.framework, self.dtype, self.device, self.version)

    @property
    def label(self) -> str:
        """``candle-f32-cpu`` (``candle_v0_11_1-f32-cpu``), as the batch's log and benchmark
        are named."""
        return f"{self.key('').runner}-{self.dtype}-{self.device}"


@dataclass
class BatchRun:
    """What a batch job did: the probes taken from the cache and those computed."""

    cached: list[str] = field(default_factory=list)
    computed: list[str] = field(default_factory=list)


def identity(code: str, threads: int, **runtime: Any) -> dict[str, Any]:
    """The interpreter's identity a cached result is valid for: ``code`` (the job's
    ``code`` param, ``codeversion.code_version`` of its script and the parity modules it
    runs), ``threads``, this machine's platform and CPU model, and ``runtime`` (JSON-able:
    the framework's version, a runner binary's sha256, a GPU's name)."""
    return {
        "code": code,
        "threads": int(threads),
        "platform": platform.platform(),
        "cpu": cpu_model(),
        **runtime,
    }


def cache_key(probe: Probe, key: ProbeKey, ident: Mapping[str, Any]) -> str:
    """16 hex digits of SHA-256 over the cache version, the normalized probe's hash
    (``Probe.hash``: comments and layout do not count), ``key``'s framework, dtype and
    device, and the interpreter's identity ``ident`` (:func:`identity`). Raises
    ``TypeError`` for an identity that is not JSON data."""
    doc = {
        "version": CACHE_VERSION,
        "probe": probe.name,
        "probe_hash": probe.hash,
        "framework": key.framework,
        **({"release": key.version} if key.version else {}),
        "dtype": key.dtype,
        "device": key.device,
        "identity": dict(ident),
    }
    text = json.dumps(doc, sort_keys=True, allow_nan=False)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def cache_path(key: ProbeKey, digest: str, pattern: str = paths.PROBE_CACHE) -> Path:
    """The cache entry of ``key``'s result under ``digest`` (:func:`cache_key`)."""
    return Path(
        pattern.format(
            probe=key.probe,
            framework=key.runner,
            dtype=key.dtype,
            device=key.device,
            key=digest,
        )
    )


def _check_entry(path: Path, probe: Probe, key: ProbeKey, digest: str) -> None:
    """Raise ``ProbeResultError`` unless ``path`` is a valid result of ``key``
    (``read_results``) recorded under the cache key ``digest`` (metadata
    :data:`CACHE_KEY_FIELD`)."""
    meta, _ = read_results(path, probe, key)
    if meta.get(CACHE_KEY_FIELD) != digest:
        raise ProbeResultError(
            path, f"made under cache key {meta.get(CACHE_KEY_FIELD)!r}, not {digest!r}"
        )


def _cached(entry: Path, probe: Probe, key: ProbeKey, digest: str, log: logging.Logger) -> bool:
    """Whether ``entry`` exists and is valid (:func:`_check_entry`); a rejected entry is
    removed (logged) so that it is recomputed."""
    if not entry.exists():
        return False
    try:
        _check_entry(entry, probe, key, digest)
    except ProbeResultError as e:
        log.warning("probe %s: ignoring its cache entry (%s); recomputing", probe.name, e)
        entry.unlink(missing_ok=True)
        return False
    return True


def _store(
    entry: Path,
    probe: Probe,
    key: ProbeKey,
    digest: str,
    outcomes: Sequence[Outcome],
    metadata: Mapping,
) -> None:
    """Write one probe's result into the cache (atomically), its cache key in its
    metadata, and remove that probe's other entries of the batch."""
    write_results(entry, probe, key, outcomes, {**metadata, CACHE_KEY_FIELD: digest})
    for old in entry.parent.glob(f"{probe.name}-*.parquet"):
        if old != entry:
            old.unlink(missing_ok=True)


def publish(entry: Path, out: str | Path, probe: Probe, key: ProbeKey, digest: str) -> None:
    """Copy a cache entry to the job's output ``out``: the copy is checked
    (``read_results``, and its cache key ``digest``) before it is renamed into place
    (``fileio.atomic_path``), and gets its own modification time. Raises
    ``ProbeResultError`` (and writes nothing) when the copy is not a valid result of
    ``key``."""
    with atomic_path(out) as tmp:
        shutil.copyfile(entry, tmp)
        _check_entry(tmp, probe, key, digest)


def run_batch(
    probes: Sequence[Probe],
    batch: Batch,
    outputs: Mapping[str, str],
    ident: Mapping[str, Any],
    compute: Compute,
    log: logging.Logger,
    cache_pattern: str = paths.PROBE_CACHE,
) -> BatchRun:
    """Write the result of every probe of ``batch`` to ``outputs[probe.name]``, taking each
    from the cache when an entry made by the same probe, cell and interpreter (``ident``,
    :func:`identity`) is valid, and running the others in one call of ``compute``.

    Raises :class:`BatchError` when ``compute`` yields a probe it was not given, one twice,
    or misses one; ``results.ProbeResultError`` for outcomes that do not fit their
    probe; and whatever ``compute`` raises. No output is written then; results computed
    before the failure stay in the cache.
    """
    if set(outputs) != {p.name for p in probes}:
        raise BatchError(
            f"outputs name {sorted(outputs)}, the batch runs {[p.name for p in probes]}"
        )
    digests = {p.name: cache_key(p, batch.key(p.name), ident) for p in probes}
    entries = {
        p.name: cache_path(batch.key(p.name), digests[p.name], cache_pattern) for p in probes
    }
    run = BatchRun()
    todo = []
    for p in probes:
        if _cached(entries[p.name], p, batch.key(p.name), digests[p.name], log):
            run.cached.append(p.name)
        else:
            todo.append(p)
    log.info("%s: %d of %d probes cached", batch.label, len(run.cached), len(probes))
    log.info("cached probes: %s", ", ".join(run.cached) or "none")
    log.info("computing probes: %s", ", ".join(p.name for p in todo) or "none")
    if todo:
        by_name = {p.name: p for p in todo}
        for name, outcomes, metadata in compute(list(todo)):
            if name not in by_name:
                raise BatchError(f"{batch.label}: a result for probe {name!r}, not asked for")
            if name in run.computed:
                raise BatchError(f"{batch.label}: two results for probe {name!r}")
            _store(entries[name], by_name[name], batch.key(name), digests[name], outcomes, metadata)
            run.computed.append(name)
            log.info("probe %s: computed, cached as %s", name, entries[name])
        missing = [p.name for p in todo if p.name not in run.computed]
        if missing:
            raise BatchError(f"{batch.label}: no result for probe(s) {', '.join(missing)}")
    for p in probes:
        publish(entries[p.name], outputs[p.name], p, batch.key(p.name), digests[p.name])
    log.info("wrote %d results (%d computed)", len(probes), len(run.computed))
    return run


def job_outputs(probes: Sequence[Probe], batch: Batch, output: Sequence[str]) -> dict[str, str]:
    """A batch job's output files by probe name: ``output`` must be exactly the probes'
    ``ProbeKey.result`` files of ``batch``. Raises :class:`BatchError` otherwise."""
    want = {batch.key(p.name).result: p.name for p in probes}
    got = [str(o) for o in output]
    if sorted(got) != sorted(want):
        raise BatchError(
            f"{batch.label}: the job's outputs {sorted(got)} are not its probes' results "
            f"{sorted(want)}"
        )
    return {name: path for path, name in want.items()}
