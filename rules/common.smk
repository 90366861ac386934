# Config validation and the input functions that turn the config into file lists.
# Everything about what an experiment means lives in scripts/parity/experiments.py.

import os
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

sys.path.insert(0, os.path.join(workflow.basedir, "scripts"))

from parity.experiments import ConfigError, Plan  # noqa: E402

validate(config, "../schemas/config.schema.yaml")
try:
    PLAN = Plan(config)
except ConfigError as e:
    raise WorkflowError(str(e)) from None


wildcard_constraints:
    experiment="[a-z][a-z0-9_]*",
    dtype="f32|f64",
    device="cpu|cuda|metal",
    tag="(cpu|cuda|metal)(-[a-z][a-z0-9_]*)?",
    kind="perstep|split|diagnosis",


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
    out = {"csv": c.table(wildcards.kind)}
    if wildcards.kind == "diagnosis":
        out["result"] = c.result("diagnosis")
    return out


def all_tables():
    """Every per-comparison table and figure of the plan."""
    out = []
    for c in PLAN.comparisons():
        for kind in table_kinds(c):
            out += [c.table(kind), c.table(kind, "md"), c.figure(kind)]
    return out


def all_results():
    """The machine-readable results the summary gathers."""
    return [c.result(kind) for c in PLAN.comparisons() for kind in table_kinds(c)]


def all_outputs():
    """Targets of the default rule."""
    return all_tables() + [
        "results/tables/summary.csv",
        "results/tables/summary.md",
        "results/tables/framework_summary.csv",
        "results/tables/optimizer_defaults.csv",
    ]


# ----- the candle build ------------------------------------------------------------

RUST_DIR = Path(workflow.basedir) / "rust"
RUST_MANIFEST = str(RUST_DIR / "Cargo.toml")
RUST_SOURCES = sorted(
    str(p)
    for pattern in ("Cargo.*", "*/Cargo.toml", "*/build.rs", "*/src/**/*.rs")
    for p in RUST_DIR.glob(pattern)
)


def rust_sources(crate):
    """What one runner's build reads: the workspace manifest and lock, parity-common and
    the crate itself, so editing one runner does not rebuild (and rerun) the other."""
    return [
        p
        for p in RUST_SOURCES
        if Path(p).parent == RUST_DIR
        or Path(p).relative_to(RUST_DIR).parts[0] in ("parity-common", crate)
    ]


def cargo_target_dir(device):
    """One target directory per feature set, so a CPU build survives a GPU build.

    Under $CARGO_TARGET_DIR when set (CI points it at a cache outside the clone)."""
    features = config.get("candle", {}).get("features", {}).get(device, [])
    base = os.environ.get("CARGO_TARGET_DIR") or str(RUST_DIR / "target")
    return os.path.join(base, "-".join(sorted(features)) or "default")


def cargo_features(device):
    """cargo's --features arguments for a device, from config candle.features."""
    features = config.get("candle", {}).get("features", {}).get(device, [])
    return ["--features", ",".join(features)] if features else []


# ----- the burn build ---------------------------------------------------------------

#: burn-parity's own target directory: cargo locks a target directory while it builds, so
#: a shared one would make the candle build wait for burn's (and burn has no features).
BURN_TARGET_DIR = os.path.join(
    os.environ.get("CARGO_TARGET_DIR") or str(RUST_DIR / "target"), "burn"
)
