# The input and params functions of rules/build.smk (Snakemake's linter keeps functions
# out of a file of rules); included at its top.


def runner_binary(framework, device, version=None):
    """The Rust runner of a framework (candle-parity, burn-parity), built from a release
    (default: the primary one) for a device's features."""
    return versions.runner_binary(
        framework, version or versions.primary(config, framework), device
    )


RUST_DIR = Path(PARITY_DIR) / "rust"


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
    release the workspace does not pin (parity.plan.versions.lock_file)."""
    lock = versions.lock_file(framework, version)
    files = [p for p in rust_files(f"{framework}-parity") if p != "Cargo.lock"]
    return sorted([*files, lock])


def rust_sources(framework, version):
    """A release's build inputs, as the job names them (workdir_path)."""
    return [workdir_path(RUST_DIR / p) for p in build_files(framework, version)]


def build_params(framework, version, device):
    """What a build job receives (parity.train.build.build): the release, whether it is
    built from a staged copy of the workspace (a release the workspace does not pin) and
    which files that copy holds, the cargo target folder's name and the features, and the
    source id the binary must report.

    The source id hashes what the binary is built from (the release, its lock file, the
    runner's sources and the features), so the build job can tell its own build from
    another checkout's or another release's in a shared target folder. The target folder
    is a name, not a path: one per feature set for candle (so a CPU build survives a GPU
    build; the releases of one feature set share it, and with it the compiled common
    dependencies), burn's own (its releases and backends share it); parity.train.build
    puts it under $CARGO_TARGET_DIR when set (CI points it at a cache outside the clone),
    else under rust/target. A param holds no
    path, so a copy of the project is not rebuilt."""
    import hashlib

    features = (
        cargo_features(device)
        if framework == "candle"
        else versions.cargo_features(framework, version)
    )
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
