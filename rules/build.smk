from pathlib import Path

RUST_DIR = Path(workflow.basedir) / "rust"
RUST_SOURCES = sorted(
    str(p)
    for p in RUST_DIR.rglob("*")
    if p.suffix in (".rs", ".toml", ".lock") and "target" not in p.relative_to(RUST_DIR).parts
)


def cargo_target_dir(device):
    """One target directory per feature set, so a CPU build survives a GPU build.

    Under $CARGO_TARGET_DIR when set (CI points it at a cache outside the clone)."""
    features = config.get("candle", {}).get("features", {}).get(device, [])
    base = os.environ.get("CARGO_TARGET_DIR") or str(RUST_DIR / "target")
    return os.path.join(base, "-".join(sorted(features)) or "default")


def cargo_features(device):
    features = config.get("candle", {}).get("features", {}).get(device, [])
    return ["--features", ",".join(features)] if features else []


rule build_candle:
    """cargo build --release --locked of the candle runner, per device feature set."""
    input:
        RUST_SOURCES,
    output:
        candle_binary("{device}"),
    params:
        manifest=str(RUST_DIR / "Cargo.toml"),
        target_dir=lambda wc: cargo_target_dir(wc.device),
        features=lambda wc: cargo_features(wc.device),
    log:
        "results/logs/build/candle-{device}.log",
    benchmark:
        "results/benchmarks/build/candle-{device}.tsv"
    shell:
        "cargo build --release --locked --manifest-path {params.manifest:q}"
        " -p candle-parity --target-dir {params.target_dir:q} {params.features:q}"
        " > {log:q} 2>&1"
        " && cp {params.target_dir:q}/release/candle-parity {output:q}.tmp"
        " && mv {output:q}.tmp {output:q}"
