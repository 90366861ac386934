# One build per framework × release × device feature set (config candle.versions,
# burn.versions; parity.plan.versions): the pinned release from the workspace, another from a
# staged copy of it with that release's committed lock file.


include: "functions/build.smk"


rule build_candle:
    """cargo build --release --locked of the candle runner, per release and device feature
    set.

    A local rule: under a cluster executor it runs on the submit host, which reaches
    crates.io (compute nodes often do not) and has the Rust toolchain; the one binary
    it builds serves every node."""
    input:
        manifest=RUST_MANIFEST,
        sources=lambda wc: rust_sources("candle", wc.version),
    output:
        paths.fill(paths.RUNNER_BINARY, framework="candle"),
    log:
        paths.fill(paths.BUILD_LOG, framework="candle"),
    benchmark:
        paths.fill(paths.BUILD_BENCHMARK, framework="candle")
    wildcard_constraints:
        version=versions.VERSION_PATTERN,
    priority: first_build_priority("candle")
    localrule: True
    conda:
        "../envs/rust.yaml"
    resources:
        cargo=build_cargo_units("candle"),
    params:
        crate="candle-parity",
        build=lambda wc: build_params("candle", wc.version, wc.device),
        cargo=lambda wc: cargo_command("candle-parity", cargo_features(wc.device)),
    message:
        "{params.cargo} (candle {wildcards.version}, device {wildcards.device})"
    script:
        "../scripts/build.py"


rule build_burn:
    """cargo build --release --locked of the burn runner, per release and CPU backend
    (``0.22.1`` ndarray, ``0.22.1+flex`` Flex: CPU only, so the validity matrix schedules no
    other device), in its own target directory so the candle build never waits for it.

    A local rule, like build_candle: the submit host reaches crates.io and has the Rust
    toolchain."""
    input:
        manifest=RUST_MANIFEST,
        sources=lambda wc: rust_sources("burn", wc.version),
    output:
        paths.fill(paths.RUNNER_BINARY, framework="burn"),
    log:
        paths.fill(paths.BUILD_LOG, framework="burn"),
    benchmark:
        paths.fill(paths.BUILD_BENCHMARK, framework="burn")
    wildcard_constraints:
        device="cpu",
        version=versions.VERSION_PATTERN,
    priority: first_build_priority("burn")
    localrule: True
    conda:
        "../envs/rust.yaml"
    resources:
        cargo=build_cargo_units("burn"),
    params:
        crate="burn-parity",
        build=lambda wc: build_params("burn", wc.version, wc.device),
        cargo=lambda wc: cargo_command(
            "burn-parity", versions.cargo_features("burn", wc.version)
        ),
    message:
        "{params.cargo} (burn {wildcards.version}, device {wildcards.device})"
    script:
        "../scripts/build.py"
