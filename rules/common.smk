# Config validation and the input functions that turn the config into file lists.
# Everything about what an experiment means lives in scripts/parity/experiments.py.

import os
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

sys.path.insert(0, os.path.join(workflow.basedir, "scripts"))

from parity.experiments import ConfigError, Plan, unsupported_reason  # noqa: E402
from parity.probes import ProbeError, ProbePlan  # noqa: E402

validate(config, "../schemas/config.schema.yaml")
try:
    PLAN = Plan(config)
    PROBES = ProbePlan.from_config(config, workflow.basedir)
except (ConfigError, ProbeError) as e:
    raise WorkflowError(str(e)) from None


wildcard_constraints:
    experiment="[a-z][a-z0-9_]*",
    dtype="f32|f64",
    device="cpu|cuda|metal",
    tag="(cpu|cuda|metal)(-[a-z][a-z0-9_]*)?",
    kind="perstep|split",
    probe="[a-z][a-z0-9_]*",


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


def candle_binary(device):
    """The candle-parity binary built for a device's cargo features."""
    return f"results/bin/candle-parity-{device}"


def all_tables():
    """Every per-comparison table and figure of the plan."""
    out = []
    for c in PLAN.comparisons():
        kinds = ["perstep"] + (["split"] if c.f64_pair else [])
        for kind in kinds:
            out += [c.table(kind), c.table(kind, "md"), c.figure(kind)]
    return out


def all_results():
    """The machine-readable results the summary gathers."""
    return [
        c.result(kind)
        for c in PLAN.comparisons()
        for kind in (["perstep"] + (["split"] if c.f64_pair else []))
    ]


def all_outputs():
    """Targets of the default rule."""
    return (
        all_tables()
        + ["results/tables/summary.csv", "results/tables/summary.md"]
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

RUST_DIR = Path(workflow.basedir) / "rust"
RUST_MANIFEST = str(RUST_DIR / "Cargo.toml")
RUST_SOURCES = sorted(
    str(p)
    for pattern in ("Cargo.*", "*/Cargo.toml", "*/build.rs", "*/src/**/*.rs")
    for p in RUST_DIR.glob(pattern)
)


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
