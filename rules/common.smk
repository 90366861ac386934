# Config validation (config files read again strictly, numbers finite, the schema, the
# Plan, sizes within limits) and the input functions that turn the config into file lists
# and into the resolved data each job receives as params. What an experiment means lives
# in scripts/parity (resolve.py, plan.py); result paths in scripts/parity/paths.py.
# Near 800 lines: every input and params function of every rule is here, in sections by
# the rules that use them, because Snakemake evaluates them in the workflow's namespace;
# each is a few lines that call scripts/parity, where the logic and its tests live.

import glob
import os
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

sys.path.insert(0, os.path.join(workflow.basedir, "scripts"))

from parity import integrity, limits, paths, yamlfile  # noqa: E402
from parity import version_matrix, versions  # noqa: E402
from parity.codeversion import code_version  # noqa: E402
from parity.config import ConfigError  # noqa: E402
from parity.devices import host_device_problem  # noqa: E402
from parity.keys import RunKey  # noqa: E402
from parity.plan import Plan  # noqa: E402
from parity.probe_plan import ProbeKey, ProbePlan  # noqa: E402
from parity import probes as probes_module  # noqa: E402
from parity.probes import ProbeError  # noqa: E402

#: This run's id, recorded with the tables over many results; jobs inherit it.
os.environ.setdefault(integrity.RUN_ID_ENV, integrity.new_run_id())

LIMITS = limits.settings(config)
try:
    # Snakemake has parsed the config files already, keeping the last value of a key given
    # twice: read each again strictly and bounded, and bound the merged config (files and
    # --config values) before anything walks it.
    for _path in workflow.configfiles:
        yamlfile.load(_path, LIMITS["max_yaml_bytes"], LIMITS["max_yaml_nodes"])
    yamlfile.check_nodes(config, "the config", LIMITS["max_yaml_nodes"])
    limits.check_config_numbers(config)
except (yamlfile.YamlError, ConfigError) as e:
    raise WorkflowError(f"invalid config (nothing was run):\n  {e}") from None
CONFIG_SCHEMA = os.path.join(workflow.basedir, "schemas", "config.schema.yaml")
try:
    validate(config, CONFIG_SCHEMA)
except WorkflowError:
    # Snakemake's message prints the whole sub-schema; say where and why instead.
    from parity.configcheck import schema_errors

    raise WorkflowError(
        "invalid config (nothing was run):\n  "
        + "\n  ".join(schema_errors(config, CONFIG_SCHEMA))
    ) from None
try:
    _version_problems = versions.check(config, os.path.join(workflow.basedir, "rust"))
    if _version_problems:
        raise ConfigError.every(_version_problems)
    PLAN = Plan(config)
    limits.check_plan(PLAN, LIMITS)
    PROBES = ProbePlan.from_config(config, workflow.basedir, workdir=os.getcwd())
except (ConfigError, ProbeError) as e:
    raise WorkflowError(f"invalid config (nothing was run):\n  {e}") from None


def require_device(device):
    """Refuse, while the DAG is built, a device this host lacks, when jobs would run here:
    not for a dry run and not when an executor sends them elsewhere (Slurm)."""
    if device in PLAN.imported_devices:
        return
    if workflow.is_main_process and workflow.local_exec and not workflow.dryrun:
        problem = host_device_problem(device)
        if problem:
            raise WorkflowError(
                f"device {device} cannot run on this host: {problem}. Leave it out "
                f"(--config devices='[\"cpu\"]'), run it where it exists (e.g. "
                f"--profile profiles/slurm) and import its traces (imported_devices), or "
                f"dry-run with -n."
            )


#: Devices whose runs this host makes; imported devices' traces are only compared.
LOCAL_DEVICES = "|".join(PLAN.local_devices())
#: The probe dtypes (the training ones and half precision); probe batches only.
PROBE_DTYPES = "|".join(probes_module.PROBE_DTYPES)


#: A comparison's file-name tag: its device, then "-" and its name unless it is "main".
TAG_PATTERN = "(cpu|cuda|metal)(-[a-z][a-z0-9_]*)?"


wildcard_constraints:
    experiment="[a-z][a-z0-9_]*",
    dtype="f32|f64",
    device="cpu|cuda|metal",
    tag=TAG_PATTERN,
    comparison="[a-z][a-z0-9_]*",
    probe="[a-z][a-z0-9_]*",
    host="[a-z][a-z0-9_]*",


def code(script):
    """Param ``code`` of a rule: the hash of its script and the parity modules that script
    runs (parity.codeversion), so an edit reruns exactly the jobs whose code changed."""
    return code_version(os.path.join(workflow.basedir, "scripts", script))


def job_codes():
    """The ``code`` param of each job whose results the summary and the probe table gather:
    a result made by other code is not current."""
    return {
        # one script (rules compare and perstep) writes the three tables
        "perstep": code("compare_tables.py"),
        "split": code("compare_tables.py"),
        "diagnosis": code("compare_tables.py"),
        "localise": code("localise.py"),
        "summary": code("summary.py"),
        "probes_table": code("probes_table.py"),
        "crosshost": code("crosshost.py"),
    }


def write_partial_summary():
    """After a failed run (onerror): keep summary.csv and probes.csv only where they are
    still current, else remove them and write summary.partial.* / probes.partial.* with
    an "error" row naming the log of each comparison or probe cell without a current
    result (parity.summary.after_failed_run, parity.probes_table.after_failed_run); with
    remote hosts, each cell a host owes without a current result is an "error" row naming
    the host, the stage that failed and its log."""
    from parity import probes_table, summary

    codes = job_codes()
    comparisons = [(c, PLAN.comparison_job(c)) for c in PLAN.comparisons()]
    print(
        summary.after_failed_run(
            comparisons, PLAN.unsupported_params(), codes, remote_crosshost_jobs()
        ),
        file=sys.stderr,
    )
    if PROBES.probes:
        print(
            probes_table.after_failed_run(PROBES, codes, remote_probe_hosts()),
            file=sys.stderr,
        )


def known_experiment(experiment):
    """``experiment``, when the config runs it; else a WorkflowError naming it, for a target
    (a file under results/) that names an experiment the config lacks or disables."""
    if experiment in PLAN.experiments:
        return experiment
    if experiment in config["experiments"]:
        how = " (--configfile bench/scale.yaml)" if experiment == "scale_mlp" else ""
        raise WorkflowError(
            f"experiment {experiment!r} is disabled in the config (enabled: false): enable "
            f"it to make its files{how}"
        )
    raise WorkflowError(
        f"unknown experiment {experiment!r}: a target names it but the config has no such "
        f"experiment (experiments: {', '.join(PLAN.experiments)})"
    )


def comparison(wildcards):
    """The Comparison a table job computes."""
    known_experiment(wildcards.experiment)
    try:
        return PLAN.comparison(wildcards.experiment, wildcards.tag)
    except KeyError:
        tags = sorted(
            c.tag for c in PLAN.comparisons() if c.experiment == wildcards.experiment
        )
        raise WorkflowError(
            f"experiment {wildcards.experiment!r} has no comparison with file tag "
            f"{wildcards.tag!r} (its tags: {', '.join(tags)})"
        ) from None


def comparison_job(wildcards):
    """What a comparison job receives: the comparison, what each trace must carry, the
    model and the diagnosis settings (Plan.comparison_job); a change reruns it."""
    return PLAN.comparison_job(comparison(wildcards))


def run_settings(wildcards):
    """The resolved settings a training job receives (Plan.run_settings)."""
    known_experiment(wildcards.experiment)
    try:
        return PLAN.run_settings(wildcards.experiment, wildcards.run)
    except KeyError:
        runs = PLAN.experiments[wildcards.experiment]["runs"]
        raise WorkflowError(
            f"experiment {wildcards.experiment!r} has no run {wildcards.run!r} "
            f"(its runs: {', '.join(runs)})"
        ) from None


def fixture_settings(wildcards):
    """What a fixture job draws from (Plan.fixture_settings)."""
    return PLAN.fixture_settings(known_experiment(wildcards.experiment))


def localisation(wildcards):
    """The Comparison a localisation job replays (by comparison name and device)."""
    known_experiment(wildcards.experiment)
    tag = (
        wildcards.device
        if wildcards.comparison == "main"
        else f"{wildcards.device}-{wildcards.comparison}"
    )
    try:
        return PLAN.comparison(wildcards.experiment, tag)
    except KeyError:
        names = sorted(
            {c.name for c in PLAN.comparisons() if c.experiment == wildcards.experiment}
        )
        raise WorkflowError(
            f"experiment {wildcards.experiment!r} has no comparison {wildcards.comparison!r} "
            f"on {wildcards.device} (its comparisons: {', '.join(names)})"
        ) from None


def localise_job(wildcards):
    """What a localisation job receives: the comparison job's params (Plan.comparison_job),
    whose ``localise`` part holds the runs' settings and the replays."""
    return PLAN.comparison_job(localisation(wildcards))


def localise_inputs(wildcards):
    """A localisation's inputs: the comparison's per-step (and diagnosis) result, the
    fixture, the reference trace, and the runner binaries of the replays made here
    (``binaries``, each once: the float32 and float64 replays of a run share one)."""
    c = localisation(wildcards)
    out = {
        "perstep": c.result("perstep"),
        "fixture": PLAN.fixture(c.experiment),
        "reference": c.reference.trace,
    }
    if c.f64_pair:
        out["diagnosis"] = c.result("diagnosis")
    binaries = {
        PLAN.binary(key)
        for key in PLAN.replay_keys(c).values()
        if key.framework != "torch" and key.device not in PLAN.imported_devices
    }
    if binaries:
        out["binaries"] = sorted(binaries)
    return out


def compare_inputs(float64):
    """The input function of the comparisons with float64 runs (``float64`` true, for rule
    ``compare``; their four traces by role) or of those without (``perstep``; the two
    float32 traces), and the fixture. Each refuses the other's comparisons: the tag
    constraints (float32_only_tag) already keep per-step files apart, and a split or
    diagnosis table asked of a comparison without float64 runs gets the reason."""

    def inputs(wildcards):
        c = comparison(wildcards)
        if float64 and c.f64_pair is None:
            raise WorkflowError(
                f"{c.experiment} {c.tag} has no float64 runs (run {c.reference.run} or "
                f"{c.candidate.run} has no float64), so no split or diagnosis table; its "
                f"per-step table is made by rule perstep"
            )
        if not float64 and c.f64_pair is not None:
            raise WorkflowError(
                f"{c.experiment} {c.tag} has float64 runs: its tables are made by rule compare"
            )
        return {
            **{role: k.trace for role, k in c.keys.items()},
            "fixture": PLAN.fixture(c.experiment),
        }

    return inputs


def float32_only_tag(only):
    """The ``tag`` constraint of the comparison rules, so that every per-step file has one
    maker: with ``only`` true (rule perstep) it matches exactly the tags of the comparisons
    without float64 runs (Plan.float32_only), each only right after its own experiment's
    folder and the ``perstep-`` of its file names (a lookbehind per comparison, as every
    output of a per-step table is ``…/{experiment}/perstep-{tag}.{ext}``); with ``only``
    false (rule compare) it matches every tag but those there, and still matches them in
    the split and diagnosis file names, where compare_inputs names why there is none. None
    without such comparisons: perstep then matches nothing and compare every tag."""
    import re

    at = "|".join(
        f"(?<=/{re.escape(c.experiment)}/perstep-){re.escape(c.tag)}"
        for c in PLAN.float32_only()
    )
    if not at:
        return "(?!)" if only else TAG_PATTERN
    return f"(?:{at})(?=\\.)" if only else f"(?!(?:{at})\\.){TAG_PATTERN}"


def table_outputs(kind, prefix=""):
    """The outputs of one table of a comparison job, ``kind`` perstep, split or diagnosis
    (keys prefixed with ``prefix``: the compare job writes three tables): its CSV, Markdown
    twin, HTML twin and figure (PNG in the report, SVG), and its machine-readable result.
    Each kind has its own captions (report/captions/{kind}.rst, {kind}_figure.rst)."""
    table = lambda ext: paths.fill(paths.TABLE, kind=kind, ext=ext)
    figure = lambda ext: paths.fill(paths.FIGURE, kind=kind, ext=ext)
    out = {
        "csv": table("csv"),
        "md": table("md"),
        "html": report(
            table("html"),
            caption=f"../report/captions/{kind}.rst",
            category="2 Experiments",
            subcategory="{experiment}",
            labels={"comparison": "{tag}", "table": kind, "kind": "table"},
        ),
        "result": paths.fill(paths.COMPARE_RESULT, kind=kind),
        "png": report(
            figure("png"),
            caption=f"../report/captions/{kind}_figure.rst",
            category="2 Experiments",
            subcategory="{experiment}",
            labels={"comparison": "{tag}", "table": kind, "kind": "figure"},
        ),
        "svg": figure("svg"),
    }
    return {prefix + k: v for k, v in out.items()}


def probe_path(pattern, framework):
    """A probe batch's log or benchmark pattern for ``framework`` (wildcards dtype,
    device)."""
    return paths.fill(pattern, framework=framework)


def probe_batch_results(framework):
    """A probe batch's outputs: the result of every probe for ``framework``, patterns with
    the wildcards dtype and device (``ProbeKey.result``)."""
    return [
        paths.fill(paths.PROBE_RESULT, probe=p, framework=framework)
        for p in PROBES.probes
    ]


def runner_binary(framework, device, version=None):
    """The Rust runner of a framework (candle-parity, burn-parity), built from a release
    (default: the primary one) for a device's features."""
    return versions.runner_binary(
        framework, version or versions.primary(config, framework), device
    )


def run_binary(wildcards):
    """The binary a Rust run's job starts: its release's build for the device."""
    return PLAN.binary(
        RunKey(wildcards.experiment, wildcards.run, wildcards.dtype, wildcards.device)
    )


def all_tables():
    """Every per-comparison table and figure of the plan."""
    return tables_and_figures(PLAN.comparisons())


def all_results():
    """The machine-readable results the summary gathers: every comparison's, and with
    remote hosts every cross-host job's (their rows are the hosts' cells, cpu@mac)."""
    return [c.result(kind) for c in PLAN.comparisons() for kind in c.kinds] + [
        j["result"] for j in remote_crosshost_jobs()
    ]


def tables_and_figures(comparisons):
    """Every table and figure of these comparisons."""
    out = []
    for c in comparisons:
        for kind in c.kinds:
            out += [c.table(kind), c.table(kind, "md"), c.figure(kind)]
    return out


def device_outputs(device):
    """A per-device target: that device's comparisons and probe results (with the
    reference runs they need, which are reused where present)."""
    require_device(device)
    return (
        tables_and_figures(PLAN.for_devices([device]).comparisons())
        + PROBES.for_devices([device]).results()
    )


def check_inputs(wildcards):
    """The tables whose verdicts the check target gates on, and their records."""
    out = {
        "summary": paths.SUMMARY.format(ext="csv"),
        "summary_sources": paths.SUMMARY_SOURCES,
    }
    if PROBES.probes:
        out["probes"] = paths.PROBES_TABLE.format(ext="csv")
        out["probes_sources"] = paths.PROBES_SOURCES
    return out


def all_outputs():
    """Targets of the default rule (refusing configured devices this host lacks); with
    remote hosts in the config, the remote target's outputs too (the summary gathers the
    hosts' cells)."""
    for device in PLAN.devices:
        require_device(device)
    return (
        (remote_outputs() if REMOTE_HOSTS else [])
        + all_tables()
        + [k.trace for k in PLAN.runs()]
        + [
            paths.SUMMARY.format(ext="csv"),
            paths.SUMMARY.format(ext="md"),
            paths.SUMMARY_SOURCES,
            paths.FRAMEWORK_SUMMARY.format(ext="csv"),
            paths.VERSIONS_TABLE.format(ext="csv"),
            paths.OPTIMIZER_DEFAULTS.format(ext="csv"),
            paths.PROVENANCE.format(ext="csv"),
            paths.TRAINING_LOOP_PAGE,
        ]
        + PROBES.outputs()
        + ([paths.PROBES_SOURCES] if PROBES.probes else [])
    )


def versions_table_inputs(wildcards):
    """The release matrix reads the summary and, with probes, the probe table."""
    out = {"summary": paths.SUMMARY.format(ext="csv")}
    if PROBES.probes:
        out["probes"] = paths.PROBES_TABLE.format(ext="csv")
    return out


def summary_outputs():
    """The summary and the probe table, with their records: what the check target reads."""
    return (
        [paths.SUMMARY.format(ext=e) for e in ("csv", "md")]
        + [paths.SUMMARY_SOURCES]
        + PROBES.outputs()
        + ([paths.PROBES_SOURCES] if PROBES.probes else [])
    )


# ----- probes ----------------------------------------------------------------------


def probe_files():
    """The probe files a probe batch reads: every probe's."""
    return [PROBES.path(p) for p in PROBES.probes]


def probe_runner(framework, wildcards):
    """The runner of a probe batch: the framework, or with wildcard ``release`` (a further
    release's suffix, ``0_11_1``) that release's runner name (``candle_v0_11_1``)."""
    release = getattr(wildcards, "release", None)
    return framework if release is None else f"{framework}_v{release}"


def probe_batch_params(framework):
    """Input function: the normalized probes a batch job runs, as plain data, in
    ``ProbePlan.batches`` order. Refuses a cell of the validity matrix that cannot run
    (float64 on Metal), a release the config does not list, and a batch whose probes are
    not every probe (the rules' outputs are every probe's result)."""

    def params(wildcards):
        runner = probe_runner(framework, wildcards)
        reason = PROBES.unsupported(
            ProbeKey("", framework, wildcards.dtype, wildcards.device)
        )
        if reason is not None:
            raise WorkflowError(
                f"probes: {runner} {wildcards.dtype} {wildcards.device} cannot run: {reason}"
            )
        keys = PROBES.batches().get((runner, wildcards.dtype, wildcards.device))
        names = [k.probe for k in keys or []]
        if sorted(names) != sorted(PROBES.probes):
            raise WorkflowError(
                f"probes: the {runner} {wildcards.dtype} {wildcards.device} batch runs "
                f"{names or 'nothing'}, not every probe"
            )
        return [PROBES.probe(n).as_params() for n in names]

    return params


def probe_binary(framework):
    """Input function: the binary of a Rust probe batch's release for its device."""

    def binary(wildcards):
        try:
            _, version = PROBES.release_of(probe_runner(framework, wildcards))
        except KeyError as e:
            raise WorkflowError(f"probes: {e.args[0]}") from None
        return runner_binary(framework, wildcards.device, version or None)

    return binary


def probe_release(framework):
    """Param function: a Rust probe batch's (framework, version); version "" for the
    primary release (ProbeKey.version)."""
    return lambda wildcards: list(PROBES.release_of(probe_runner(framework, wildcards)))


# ----- the candle build ------------------------------------------------------------


def workdir_path(path):
    """A file of the workflow's folder as a job's input names it: relative to the working
    directory (``rust/Cargo.toml`` when that is the workflow's folder). Snakemake reruns a job
    whose input set changed, so an absolute path would rerun every job in a copy of the
    project (a moved checkout, CI's clone) although its results/ came along."""
    return os.path.relpath(path)


RUST_DIR = Path(workflow.basedir) / "rust"
RUST_MANIFEST = workdir_path(RUST_DIR / "Cargo.toml")
#: What the Rust builds read, relative to RUST_DIR.
RUST_FILES = sorted(
    str(p.relative_to(RUST_DIR))
    for pattern in ("Cargo.*", "*/Cargo.toml", "*/build.rs", "*/src/**/*.rs")
    for p in RUST_DIR.glob(pattern)
)


def rust_files(crate):
    """What one runner's build reads (relative to RUST_DIR): the workspace manifest and
    lock, parity-common and the crate itself, so editing one runner does not rebuild (and
    rerun) the other."""
    return [
        p
        for p in RUST_FILES
        if len(Path(p).parts) == 1 or Path(p).parts[0] in ("parity-common", crate)
    ]


def build_files(framework, version):
    """What the build of one release of a framework's runner reads (relative to RUST_DIR):
    :func:`rust_files`, with the release's own lock file in place of Cargo.lock for a
    release the workspace does not pin (parity.versions.lock_file)."""
    lock = versions.lock_file(framework, version)
    files = [p for p in rust_files(f"{framework}-parity") if p != "Cargo.lock"]
    return sorted([*files, lock])


def rust_sources(framework, version):
    """A release's build inputs, as the job names them (workdir_path)."""
    return [workdir_path(RUST_DIR / p) for p in build_files(framework, version)]


def build_params(framework, version, device):
    """What a build job receives (scripts/build_runner.py): the release, whether it is
    built from a staged copy of the workspace (a release the workspace does not pin) and
    which files that copy holds, the cargo target folder's name and the features, and the
    source id the binary must report.

    The source id hashes what the binary is built from (the release, its lock file, the
    runner's sources and the features), so the build job can tell its own build from
    another checkout's or another release's in a shared target folder. The target folder
    is a name, not a path: one per feature set for candle (so a CPU build survives a GPU
    build; the releases of one feature set share it, and with it the compiled common
    dependencies), burn's own; build_runner.py puts it under $CARGO_TARGET_DIR when set
    (CI points it at a cache outside the clone), else under rust/target. A param holds no
    path, so a copy of the project is not rebuilt."""
    import hashlib

    features = cargo_features(device) if framework == "candle" else []
    h = hashlib.sha256(" ".join([framework, version, *features]).encode())
    for path in build_files(framework, version):
        h.update(path.encode())
        h.update((RUST_DIR / path).read_bytes())
    names = config.get("candle", {}).get("features", {}).get(device, [])
    target = ("-".join(sorted(names)) or "default") if framework == "candle" else "burn"
    staged = version != versions.pinned(framework)
    return {
        "framework": framework,
        "version": version,
        "staged": staged,
        "stage_files": RUST_FILES if staged else [],
        "target": target,
        "features": features,
        "source_id": h.hexdigest()[:16],
    }


def cargo_command(crate, features):
    """The cargo build command of a runner, as its build job's message shows it (the job
    adds --manifest-path and --target-dir)."""
    return " ".join(["cargo build --release --locked -p", crate, *features])


def cargo_features(device):
    """cargo's --features arguments for a device, from config candle.features."""
    features = config.get("candle", {}).get("features", {}).get(device, [])
    return ["--features", ",".join(features)] if features else []


# ----- detection power (rules/faults.smk) ----------------------------------------


def sensitivity_inputs(wildcards):
    """The clean run's float32 CPU trace, the fixture and, for a Rust run, its binary."""
    s = PLAN.sensitivity
    if s is None:
        named = config.get("faults", {}).get("sensitivity")
        if named is None:
            raise WorkflowError("config faults.sensitivity is not set")
        known_experiment(named["experiment"])
    e = s["experiment"]
    out = {
        "reference": paths.TRACE.format(
            experiment=e, run=s["against"], dtype="f32", device="cpu"
        ),
        "fixture": PLAN.fixture(e),
    }
    if s["settings"]["framework"] != "torch":
        out["binary"] = versions.run_binary(s["settings"], "cpu")
    return out


# ----- fuzz ------------------------------------------------------------------------


def fuzz_settings():
    """The ``fuzz`` config block with every default filled in (ops: every op the
    generator supports), and ``releases``: the release fuzzed of each framework, its
    primary one (known bugs of other releases only do not cover its findings)."""
    from parity.fuzz.generate import SUPPORTED_OPS

    given = config.get("fuzz") or {}
    settings = {
        "seed": 0,
        "cases_per_op": 20,
        "ops": list(SUPPORTED_OPS),
        "frameworks": ["candle", "burn"],
        "dtypes": ["f32"],
        "shrinks_per_class": 2,
        "known_bugs": "probes",
        **{k: v for k, v in given.items() if v is not None},
    }
    unknown = sorted(set(settings["ops"]) - set(SUPPORTED_OPS))
    if unknown:
        raise WorkflowError(
            "invalid config (nothing was run):\n  config: fuzz.ops: the fuzzer does not "
            f"generate {', '.join(unknown)}; it generates {', '.join(SUPPORTED_OPS)}"
        )
    settings["releases"] = {
        fw: versions.primary(config, fw) for fw in settings["frameworks"]
    }
    return settings


def fuzz_binaries():
    """The Rust runners the fuzz job starts: one per framework of ``fuzz.frameworks``,
    in that order."""
    return [runner_binary(fw, "cpu") for fw in fuzz_settings()["frameworks"]]


def fuzz_known_folder():
    """The folder whose probes' ``known_bug`` entries the findings are matched with
    (``fuzz.known_bugs``, relative to the workflow's folder; default ``probes``)."""
    folder = fuzz_settings()["known_bugs"]
    return folder if os.path.isabs(folder) else os.path.join(workflow.basedir, folder)


def fuzz_known_probes():
    """Every probe file of :func:`fuzz_known_folder`."""
    return sorted(glob.glob(os.path.join(fuzz_known_folder(), "*.yaml")))


# ----- remote hosts (rules/remote.smk) ------------------------------------------------

#: Remote hosts by label (config `remote`): each runs its devices' jobs in its own checkout.
REMOTE_HOSTS = config.get("remote") or {}


def remote_host(host):
    """A configured remote host's settings, else a WorkflowError naming the known ones."""
    if host not in REMOTE_HOSTS:
        raise WorkflowError(
            f"no remote host {host!r} in the config (remote: {', '.join(REMOTE_HOSTS) or 'none'})"
        )
    return REMOTE_HOSTS[host]


def checkout_commit():
    """The commit of this checkout (the workflow's folder): what each remote runs."""
    import subprocess

    proc = subprocess.run(
        ["git", "-C", workflow.basedir, "rev-parse", "HEAD"],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise WorkflowError(
            f"remote: {workflow.basedir} is not a git checkout with a commit: a remote host "
            f"runs this checkout's commit ({proc.stderr.strip()})"
        )
    return proc.stdout.strip()


def remote_fetch_params(host):
    """What a host's job receives (parity.remote.fetch_params)."""
    from parity import remote

    settings = remote_host(host)
    return remote.fetch_params(
        PLAN,
        PROBES.for_devices(settings["devices"]).results(),
        host,
        settings,
        checkout_commit(),
        config,
    )


def crosshost_job(wildcards):
    """What a cross-host job reads (parity.crosshost.crosshost_params)."""
    from parity.crosshost import crosshost_params

    known_experiment(wildcards.experiment)
    settings = remote_host(wildcards.host)
    return crosshost_params(
        PLAN, wildcards.host, settings["devices"], wildcards.experiment
    )


def crosshost_inputs(wildcards):
    """This host's traces a cross-host job holds the remote's against."""
    from parity.crosshost import here_traces

    return here_traces(crosshost_job(wildcards))


def remote_crosshost_jobs():
    """Every cross-host job the summary gathers, one per remote host and experiment:
    ``{"host", "experiment", "result", "job"}`` (parity.summary.RemoteJobs); empty without
    remote hosts."""
    from parity.crosshost import crosshost_params

    return [
        {
            "host": host,
            "experiment": e,
            "result": paths.CROSSHOST_RESULT.format(experiment=e, host=host),
            "job": crosshost_params(PLAN, host, settings["devices"], e),
        }
        for host, settings in REMOTE_HOSTS.items()
        for e in PLAN.experiments
    ]


def remote_probe_hosts():
    """Remote hosts' devices for the probe table (label → devices); empty without remote
    hosts or without probes."""
    if not PROBES.probes:
        return {}
    return {host: list(s["devices"]) for host, s in REMOTE_HOSTS.items()}


def remote_manifests():
    """Every remote host's manifest (none without remote hosts)."""
    return [paths.REMOTE_MANIFEST.format(host=host) for host in REMOTE_HOSTS]


def remote_outputs():
    """The remote target: per host, its manifest and one cross-host table per experiment;
    and the summary and the probe table, which hold the hosts' cells (cpu@mac)."""
    if not REMOTE_HOSTS:
        raise WorkflowError(
            "the remote target needs remote hosts in the config (remote: {mac: {ssh: "
            "user@mac.local, path: ~/parity, devices: [metal, cpu]}}; docs/remote.md)"
        )
    out = []
    for host in REMOTE_HOSTS:
        out.append(paths.REMOTE_MANIFEST.format(host=host))
        for e in PLAN.experiments:
            for ext in ("csv", "md"):
                out.append(
                    paths.CROSSHOST_TABLE.format(experiment=e, host=host, ext=ext)
                )
    return out + summary_outputs()


def write_remote_status():
    """After a failed run (onerror): name each remote host without results and its missing
    cells (results/tables/remote.partial.csv)."""
    from parity import remote

    labels = {}
    for host, settings in REMOTE_HOSTS.items():
        keys = remote.host_runs(PLAN, settings["devices"])
        labels[host] = {k.trace: remote.cell_label(k, host) for k in keys}
    rows = remote.failed_hosts_report(REMOTE_HOSTS, labels)
    if rows:
        print(remote.write_failed_hosts(rows), file=sys.stderr)
