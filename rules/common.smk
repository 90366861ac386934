# Config validation and the input functions that turn the config into file lists and
# into the resolved data each job receives as params. What an experiment means lives in
# scripts/parity (resolve.py, plan.py); result paths in scripts/parity/paths.py.

import os
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

sys.path.insert(0, os.path.join(workflow.basedir, "scripts"))

from parity import paths  # noqa: E402
from parity.codeversion import code_version  # noqa: E402
from parity.config import ConfigError  # noqa: E402
from parity.devices import host_device_problem  # noqa: E402
from parity.frameworks import unsupported_reason  # noqa: E402
from parity.plan import Plan  # noqa: E402
from parity.probe_plan import ProbePlan  # noqa: E402
from parity.probes import ProbeError  # noqa: E402

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


def code(script):
    """Param ``code`` of a rule: the hash of its script and the parity modules that script
    runs (parity.codeversion), so an edit reruns exactly the jobs whose code changed."""
    return code_version(os.path.join(workflow.basedir, "scripts", script))


def write_partial_summary():
    """After a failed run (e.g. with --keep-going): summarise what exists; each comparison
    that could not be made gets verdict "error" and the log of the job that failed."""
    from parity import summary

    n = summary.partial_summary_job(
        PLAN.comparisons(),
        PLAN.unsupported_params(),
        paths.SUMMARY.format(ext="csv"),
        paths.SUMMARY.format(ext="md"),
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


def comparison_job(wildcards):
    """What a comparison job receives: the comparison, what each trace must carry, the
    model and the diagnosis settings (Plan.comparison_job); a change reruns it."""
    return PLAN.comparison_job(comparison(wildcards))


def run_settings(wildcards):
    """The resolved settings a training job receives (Plan.run_settings)."""
    return PLAN.run_settings(wildcards.experiment, wildcards.run)


def split_traces(wildcards):
    """The four traces of a float64 split by role, and the fixture."""
    c = comparison(wildcards)
    return {
        **{role: k.trace for role, k in c.keys.items()},
        "fixture": PLAN.fixture(c.experiment),
    }


def diagnosis_inputs(wildcards):
    """The diagnosis reads the split's traces and the per-step result (its first step
    beyond the tolerance)."""
    return {
        **split_traces(wildcards),
        "perstep": comparison(wildcards).result("perstep"),
    }


def table_outputs(kind):
    """The outputs of a comparison job of ``kind`` (perstep, split, diagnosis): its CSV,
    Markdown twin, HTML twin (in the report) and machine-readable result."""
    table = lambda ext: paths.fill(paths.TABLE, kind=kind, ext=ext)
    return {
        "csv": table("csv"),
        "md": table("md"),
        "html": report(
            table("html"),
            caption="../report/captions/table.rst",
            category="2 Experiments",
            subcategory="{experiment}",
            labels={"comparison": "{tag}", "table": kind, "kind": "table"},
        ),
        "result": paths.fill(paths.COMPARE_RESULT, kind=kind),
    }


def probe_path(pattern, framework):
    """A probe job's result, log or benchmark pattern for ``framework``."""
    return paths.fill(pattern, framework=framework)


def runner_binary(framework, device):
    """The Rust runner of a framework (candle-parity, burn-parity), built for a device's
    features."""
    return paths.fill(paths.RUNNER_BINARY, framework=framework, device=device)


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
    return [c.result(kind) for c in PLAN.comparisons() for kind in c.kinds]


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
    probes = ProbePlan(PROBES.probes, [device], PLAN.dtypes)
    return (
        tables_and_figures(PLAN.for_devices([device]).comparisons()) + probes.results()
    )


def check_inputs(wildcards):
    """The tables whose verdicts the check target gates on."""
    out = {"summary": paths.SUMMARY.format(ext="csv")}
    if PROBES.probes:
        out["probes"] = paths.PROBES_TABLE.format(ext="csv")
    return out


def all_outputs():
    """Targets of the default rule (refusing configured devices this host lacks)."""
    for device in PLAN.devices:
        require_device(device)
    return (
        all_tables()
        + [k.trace for k in PLAN.runs()]
        + [
            paths.SUMMARY.format(ext="csv"),
            paths.SUMMARY.format(ext="md"),
            paths.FRAMEWORK_SUMMARY.format(ext="csv"),
            paths.OPTIMIZER_DEFAULTS.format(ext="csv"),
            paths.PROVENANCE.format(ext="csv"),
            paths.TRAINING_LOOP_PAGE,
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


def sensitivity_inputs(wildcards):
    """The clean run's float32 CPU trace, the fixture and, for a Rust run, its binary."""
    s = PLAN.sensitivity
    if s is None:
        raise WorkflowError("config faults.sensitivity is not set")
    e = s["experiment"]
    out = {
        "reference": paths.TRACE.format(
            experiment=e, run=s["against"], dtype="f32", device="cpu"
        ),
        "fixture": PLAN.fixture(e),
    }
    framework = s["settings"]["framework"]
    if framework != "torch":
        out["binary"] = runner_binary(framework, "cpu")
    return out
