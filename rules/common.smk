# Config validation and the input functions that turn the config into file lists.
# Everything about what an experiment means lives in scripts/parity/experiments.py.

import os
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

sys.path.insert(0, os.path.join(workflow.basedir, "scripts"))

from parity.experiments import (  # noqa: E402
    COMPARE_LOG,
    TRACE,
    TRAIN_LOG,
    DEVICES,
    ConfigError,
    Plan,
    host_device_problem,
    unsupported_reason,
)
from parity.probes import ProbeError, ProbePlan  # noqa: E402

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
    PLAN = Plan(config)
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


wildcard_constraints:
    experiment="[a-z][a-z0-9_]*",
    dtype="f32|f64",
    device="cpu|cuda|metal",
    tag="(cpu|cuda|metal)(-[a-z][a-z0-9_]*)?",
    kind="perstep|split|diagnosis",
    probe="[a-z][a-z0-9_]*",


PARITY_DIR = Path(workflow.basedir) / "scripts" / "parity"
#: Modules that shape a trace; a change to them reruns the training jobs.
TRACE_MODULES = (
    "experiments",
    "fileio",
    "frames",
    "provenance",
    "rust_runner",
    "schema",
    "torch_runner",
)


def code_version(modules=None):
    """SHA-256 of the parity modules a job runs (all when None). Given as a param, so
    Snakemake reruns a job when its code changes, not only when its script does."""
    import hashlib

    names = modules or sorted(p.stem for p in PARITY_DIR.glob("*.py"))
    h = hashlib.sha256()
    for name in names:
        h.update((PARITY_DIR / f"{name}.py").read_bytes())
    return h.hexdigest()[:16]


ANALYSIS_CODE = code_version()
TRACE_CODE = code_version(TRACE_MODULES)


def compare_log(kind):
    """Log pattern of a comparison job (parity.experiments.COMPARE_LOG)."""
    return COMPARE_LOG.replace("{kind}", kind)


def write_partial_summary():
    """After a failed run (e.g. with --keep-going): summarise what exists; each comparison
    that could not be made gets verdict "error" and the log of the job that failed."""
    from parity import jobs

    n = jobs.partial_summary_job(
        PLAN, "results/tables/summary.csv", "results/tables/summary.md"
    )
    if n:
        print(
            f"{n} comparison(s) could not be made; results/tables/summary.md lists them "
            "with verdict 'error' and the log to read",
            file=sys.stderr,
        )


def comparison(wildcards):
    """The Comparison a table job computes."""
    return PLAN.comparison(wildcards.experiment, wildcards.tag)


def comparison_params(wildcards):
    """What a comparison depends on besides its input files (reruns it when changed)."""
    c = comparison(wildcards)
    return {
        "reference": c.reference.label,
        "candidate": c.candidate.label,
        "expect": c.expect,
        "tolerance": c.tolerance,
    }


def split_traces(wildcards):
    c = comparison(wildcards)
    ref64, cand64 = c.f64_pair
    return {
        "ref32": c.reference.trace,
        "cand32": c.candidate.trace,
        "ref64": ref64.trace,
        "cand64": cand64.trace,
        "fixture": PLAN.fixture(c.experiment),
    }


def runner_binary(framework, device):
    """The Rust runner of a framework (candle-parity, burn-parity), built for a device's
    features."""
    return f"results/bin/{framework}-parity-{device}"


def table_kinds(c):
    """Tables of a comparison: per-step always; split and diagnosis need f64 runs."""
    return ["perstep"] + (["split", "diagnosis"] if c.f64_pair else [])


def figure_inputs(wildcards):
    """A figure's table, and for a diagnosis also its localised findings."""
    c = comparison(wildcards)
    out = {"csv": c.table(wildcards.kind), "perstep": c.result("perstep")}
    if wildcards.kind == "diagnosis":
        out["result"] = c.result("diagnosis")
    return out


def all_tables():
    """Every per-comparison table and figure of the plan."""
    return tables_and_figures(PLAN.comparisons())


def all_results():
    """The machine-readable results the summary gathers."""
    return [c.result(kind) for c in PLAN.comparisons() for kind in table_kinds(c)]


def tables_and_figures(comparisons):
    """Every table and figure of these comparisons."""
    out = []
    for c in comparisons:
        for kind in table_kinds(c):
            out += [c.table(kind), c.table(kind, "md"), c.figure(kind)]
    return out


def device_outputs(device):
    """A per-device target: that device's comparisons and probe results (with the
    reference runs they need, which are reused where present)."""
    require_device(device)
    probes = ProbePlan(PROBES.probes, [device], PLAN.dtypes)
    return (
        tables_and_figures(PLAN.for_devices([device]).comparisons()) + probes.results()
    )


def check_inputs(wildcards):
    """The tables whose verdicts the check target gates on."""
    out = {"summary": "results/tables/summary.csv"}
    if PROBES.probes:
        out["probes"] = "results/tables/probes.csv"
    return out


def all_outputs():
    """Targets of the default rule (refusing configured devices this host lacks)."""
    for device in PLAN.devices:
        require_device(device)
    return (
        all_tables()
        + [k.trace for k in PLAN.runs()]
        + [
            "results/tables/summary.csv",
            "results/tables/summary.md",
            "results/tables/framework_summary.csv",
            "results/tables/optimizer_defaults.csv",
            "results/tables/provenance.csv",
            "results/report/training_loop.html",
        ]
        + PROBES.outputs()
    )


# ----- probes ----------------------------------------------------------------------


def probe_file(wildcards):
    """The probe file a probe job reads."""
    return PROBES.path(wildcards.probe)


def probe_params(framework):
    """Input function: the normalized probe a job runs, as plain data. Refuses a cell of
    the validity matrix that cannot run (float64 on Metal)."""

    def params(wildcards):
        reason = unsupported_reason(framework, wildcards.device, wildcards.dtype)
        if reason is not None:
            raise WorkflowError(
                f"probe {wildcards.probe}: {framework} {wildcards.dtype} "
                f"{wildcards.device} cannot run: {reason}"
            )
        return PROBES.probe(wildcards.probe).as_params()

    return params


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


def rust_sources(crate):
    """A runner's build inputs, as the job names them (workdir_path)."""
    return [workdir_path(RUST_DIR / p) for p in rust_files(crate)]


def rust_source_id(crate, features):
    """Hash of what a runner's binary is built from (its sources and cargo features),
    embedded in the binary so the build rule can tell its own build from another
    checkout's (scripts/build_runner.py)."""
    import hashlib

    h = hashlib.sha256(" ".join(features).encode())
    for path in rust_files(crate):
        h.update(path.encode())
        h.update((RUST_DIR / path).read_bytes())
    return h.hexdigest()[:16]


def cargo_target_name(device):
    """The candle build's cargo target folder, one per feature set so a CPU build survives
    a GPU build: a name, not a path. scripts/build_runner.py puts it under
    $CARGO_TARGET_DIR when set (CI points it at a cache outside the clone), else under
    rust/target; a param holds no path, so a copy of the project is not rebuilt."""
    features = config.get("candle", {}).get("features", {}).get(device, [])
    return "-".join(sorted(features)) or "default"


def cargo_command(crate, features):
    """The cargo build command of a runner, as its build job's message shows it (the job
    adds --manifest-path and --target-dir)."""
    return " ".join(["cargo build --release --locked -p", crate, *features])


def cargo_features(device):
    """cargo's --features arguments for a device, from config candle.features."""
    features = config.get("candle", {}).get("features", {}).get(device, [])
    return ["--features", ",".join(features)] if features else []


# ----- the burn build ---------------------------------------------------------------

#: burn-parity's own cargo target folder (a name, as cargo_target_name): cargo locks a
#: target folder while it builds, so a shared one would make the candle build wait for
#: burn's (and burn has no features).
BURN_TARGET_NAME = "burn"


# ----- detection power (rules/faults.smk) ----------------------------------------


def fault_inputs(wildcards):
    """What the detection table reads: the results and per-step table of every fault
    comparison and of every correct pair of the default target."""
    comps = PLAN.fault_comparisons() + PLAN.correct_pairs()
    return [c.result(k) for c in comps for k in table_kinds(c)] + [
        c.table("perstep") for c in comps
    ]


def sensitivity_inputs(wildcards):
    """The clean run's float32 CPU trace, the fixture and, for a Rust run, its binary."""
    s = PLAN.sensitivity
    if s is None:
        raise WorkflowError("config faults.sensitivity is not set")
    e = s["experiment"]
    out = {
        "reference": TRACE.format(
            experiment=e, run=s["against"], dtype="f32", device="cpu"
        ),
        "fixture": PLAN.fixture(e),
    }
    framework = PLAN.run_settings(e, s["run"])["framework"]
    if framework != "torch":
        out["binary"] = runner_binary(framework, "cpu")
    return out
