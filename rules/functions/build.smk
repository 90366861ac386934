# The input and params functions of rules/build.smk (Snakemake's linter keeps functions
# out of a file of rules); included at its top.

from parity.plan import builds  # noqa: E402


def runner_binary(framework, device, version=None):
    """The Rust runner of a framework (candle-parity, burn-parity), built from a release
    (default: the primary one) for a device's features."""
    return versions.runner_binary(
        framework, version or versions.primary(config, framework), device
    )


RUST_DIR = Path(PARITY_DIR) / "rust"


RUST_MANIFEST = workdir_path(RUST_DIR / "Cargo.toml")


def rust_files(crate):
    """What one runner's build reads (relative to RUST_DIR; parity.plan.builds.rust_files):
    the workspace manifest and lock, parity-common and the crate itself, so editing one
    runner does not rebuild (and rerun) the other."""
    return builds.rust_files(crate, RUST_DIR)


def rust_sources(framework, version):
    """A release's build inputs, as the job names them (workdir_path)."""
    return [
        workdir_path(RUST_DIR / p)
        for p in builds.build_files(framework, version, RUST_DIR)
    ]


def build_params(framework, version, device):
    """What a build job receives (parity.train.build.build): parity.plan.builds.runner_build
    of this checkout and config (the release, whether it is built from a staged copy of the
    workspace and which files that copy holds, the cargo target folder's name, the
    features and the source id it must report: the hash of what it is built from, which
    every job that starts the binary holds its build record to)."""
    key = (framework, version, device)
    if key not in _BUILDS:
        _BUILDS[key] = builds.runner_build(config, framework, version, device, RUST_DIR)
    return _BUILDS[key]


#: build_params' answers in this run of Snakemake: the sources are hashed once per build,
#: not once per job whose params name it.
_BUILDS = {}


def runner_identity(framework, version, device):
    """What a job that starts the runner of ``framework`` ``version`` for ``device`` holds
    its build record to (parity.core.integrity.check_binary): the binary's name and
    source id, as this checkout and config build it."""
    binary = versions.runner_binary(framework, version, device)
    return {
        "binary": os.path.basename(binary),
        "source_id": build_params(framework, version, device)["source_id"],
    }


def cargo_command(crate, features):
    """The cargo build command of a runner, as its build job's message shows it (the job
    adds --manifest-path and --target-dir)."""
    return " ".join(["cargo build --release --locked -p", crate, *features])


def cargo_features(device):
    """cargo's --features arguments for a device, from config candle.features."""
    return builds.cargo_features(config, "candle", "", device)
