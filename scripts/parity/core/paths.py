"""Every result path pattern that both the rules and the Python code use, in one place.

Patterns hold Snakemake wildcards in braces. :func:`fill` fixes some of them and leaves the
others for Snakemake, so a rule's ``output:`` and :class:`parity.plan.keys.Comparison` name the
same files. Paths are relative to the working directory.
"""

from __future__ import annotations

#: One run's trace and training log: (experiment, run, dtype, device).
TRACE = "results/traces/{experiment}/{run}-{dtype}-{device}.parquet"
TRAIN_LOG = "results/logs/train/{experiment}/{run}-{dtype}-{device}.log"
TRAIN_BENCHMARK = "results/benchmarks/train/{experiment}/{run}-{dtype}-{device}.tsv"

#: An experiment's fixture (initial parameters and data, safetensors).
FIXTURE = "results/fixtures/{experiment}.safetensors"
FIXTURE_LOG = "results/logs/fixture/{experiment}.log"

#: A Rust runner's binary, built from one release of its framework (``parity.plan.versions``)
#: for a device's cargo features.
RUNNER_BINARY = "results/bin/{framework}-parity-{version}-{device}"
BUILD_LOG = "results/logs/build/{framework}-{version}-{device}.log"
BUILD_BENCHMARK = "results/benchmarks/build/{framework}-{version}-{device}.tsv"

#: An own model's runner (docs/own-model.md): the crate that links the user's port, its
#: binary for a device, its build log; the check of the port against the PyTorch model's
#: parameters before any training job; the model card the plan was made from.
OWN_RUNNER_CRATE = "results/own/{experiment}/{framework}-{device}-runner"
OWN_BINARY = "results/bin/own/{experiment}-{framework}-{device}"
OWN_BUILD_LOG = "results/logs/build/own-{experiment}-{framework}-{device}.log"
OWN_BUILD_BENCHMARK = "results/benchmarks/build/own-{experiment}-{framework}-{device}.tsv"
OWN_CHECK = "results/own/{experiment}/check-{framework}-{device}.json"
OWN_CHECK_LOG = "results/logs/own_check/{experiment}-{framework}-{device}.log"

#: A comparison's table (kind: perstep, split, diagnosis; ext: csv, md, html), figure (ext:
#: png, svg) and machine-readable result (gathered by the summary).
TABLE = "results/tables/{experiment}/{kind}-{tag}.{ext}"
FIGURE = "results/figures/{experiment}/{kind}-{tag}.{ext}"
COMPARE_RESULT = "results/compare/{experiment}/{kind}-{tag}.json"
#: The log and benchmark of a comparison job (kind: the rule, ``compare`` for a comparison
#: with float64 runs, which writes all three tables, else ``perstep``: ``Comparison.job``).
COMPARE_LOG = "results/logs/{kind}/{experiment}/{tag}.log"
COMPARE_BENCHMARK = "results/benchmarks/{kind}/{experiment}/{tag}.tsv"

#: A comparison's localisation (``parity.localise.job``): table (ext: csv, md, html),
#: figure (ext: png, svg), sealed result, log and benchmark, by comparison name and device.
LOCALISE_TABLE = "results/tables/{experiment}/localise-{comparison}-{device}.{ext}"
LOCALISE_FIGURE = "results/figures/{experiment}/localise-{comparison}-{device}.{ext}"
LOCALISE_RESULT = "results/compare/{experiment}/localise-{comparison}-{device}.json"
LOCALISE_LOG = "results/logs/localise/{experiment}/{comparison}-{device}.log"
LOCALISE_BENCHMARK = "results/benchmarks/localise/{experiment}/{comparison}-{device}.tsv"

#: One probe file run by one framework in one dtype on one device.
PROBE_RESULT = "results/probes/{probe}/{framework}-{dtype}-{device}.parquet"
#: The log and benchmark of a probe batch: one job runs every probe of a (framework, dtype,
#: device) in one process (``parity.probe.batch``).
PROBE_LOG = "results/logs/probes/{framework}-{dtype}-{device}.log"
PROBE_BENCHMARK = "results/benchmarks/probes/{framework}-{dtype}-{device}.tsv"
#: A probe batch's content cache: one probe's result under the key of what made it (the
#: normalized probe, the run and the interpreter's code; ``probe_batch.cache_key``), reused
#: when a batch reruns with the probe unchanged.
PROBE_CACHE = "results/cache/probes/{framework}-{dtype}-{device}/{probe}-{key}.parquet"

#: Tables over the whole run.
SUMMARY = "results/tables/summary.{ext}"
PROBES_TABLE = "results/tables/probes.{ext}"
FRAMEWORK_SUMMARY = "results/tables/framework_summary.{ext}"
#: The release matrix (parity.report.versions).
VERSIONS_TABLE = "results/tables/versions.{ext}"
OPTIMIZER_DEFAULTS = "results/tables/optimizer_defaults.{ext}"
PROVENANCE = "results/tables/provenance.{ext}"
TRAINING_LOOP_PAGE = "results/report/training_loop.html"
#: The index of results/ (parity.report.index): every comparison's verdict and its files.
INDEX = "results/README.md"

#: What the summary and the probe table were made from (``integrity.write_record``): the
#: run, each result's sha256, the sha256 of the tables written. ``check`` reads them.
SUMMARY_SOURCES = "results/tables/summary.sources.json"
PROBES_SOURCES = "results/tables/probes.sources.json"
#: The records of the pages one job makes from a few files (``parity.report.sealed``): the
#: sha256 of each file it wrote, its inputs', its params hash and its code. ``check`` reads
#: them.
PROVENANCE_SOURCES = "results/tables/provenance.sources.json"
INDEX_SOURCES = "results/index.sources.json"
FRAMEWORK_SUMMARY_SOURCES = "results/tables/framework_summary.sources.json"
OPTIMIZER_DEFAULTS_SOURCES = "results/tables/optimizer_defaults.sources.json"
VERSIONS_TABLE_SOURCES = "results/tables/versions.sources.json"
TRAINING_LOOP_SOURCES = "results/report/training_loop.sources.json"
#: After a failed run, what could be summarised (ext: csv, md, html, sources.json), written
#: by ``onerror`` beside (never over) the tables the rules write.
SUMMARY_PARTIAL = "results/tables/summary.partial.{ext}"
PROBES_PARTIAL = "results/tables/probes.partial.{ext}"
#: A remote host's results brought back (``parity.remote.fetch``): its ``results/`` layout below
#: the folder, the manifest of what came back (the fetch job's output) and the job's log.
REMOTE_DIR = "results/remote/{host}"
REMOTE_MANIFEST = "results/remote/{host}/manifest.json"
REMOTE_LOG = "results/logs/remote/{host}.log"
#: After a failed run with remote hosts (config ``remote``): one row per cell of a host
#: without results, naming the host, the stage that failed and its log (``parity.remote.fetch``).
REMOTE_PARTIAL = "results/tables/remote.partial.csv"
#: A host's results compared with this host's, per experiment (``parity.remote.crosshost``).
CROSSHOST_TABLE = "results/tables/{experiment}/crosshost-{host}.{ext}"
CROSSHOST_LOG = "results/logs/crosshost/{experiment}/{host}.log"
#: The cross-host job's sealed result (its rows, what it read), gathered by the summary.
CROSSHOST_RESULT = "results/compare/{experiment}/crosshost-{host}.json"
#: Held while any of the above is written or removed (``fileio.exclusive_lock``).
TABLES_LOCK = "results/tables/.tables.lock"

# Layout fuzzing (target fuzz): findings table, campaign summary, one probe file and one
# framework-native reproduction per finding.
FUZZ_FINDINGS = "results/fuzz/findings.{ext}"
FUZZ_SUMMARY = "results/fuzz/summary.json"
FUZZ_PROBES = "results/fuzz/probes"
FUZZ_REPRO = "results/fuzz/repro"
#: The fuzz job's sealed record (``parity.report.sealed``): every file above, its inputs
#: (the runners, the known-bug probes), its settings and code; ``check`` holds it.
FUZZ_SOURCES = "results/fuzz/fuzz.sources.json"


def fill(pattern: str, **values: object) -> str:
    """``pattern`` with the named wildcards replaced by ``values``; the others stay.

    ``fill(TABLE, kind="perstep", ext="csv")`` is
    ``results/tables/{experiment}/perstep-{tag}.csv``. Raises ``KeyError`` for a name the
    pattern does not hold, so a typo cannot leave a wildcard behind silently.
    """
    for name, value in values.items():
        field = "{" + name + "}"
        if field not in pattern:
            raise KeyError(f"{pattern!r} has no wildcard {name!r}")
        pattern = pattern.replace(field, str(value))
    return pattern
