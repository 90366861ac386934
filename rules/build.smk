rule build_candle:
    """cargo build --release --locked of the candle runner, per device feature set.

    A local rule: under a cluster executor it runs on the submit host, which reaches
    crates.io (compute nodes often do not) and has the Rust toolchain; the one binary
    it builds serves every node."""
    input:
        manifest=RUST_MANIFEST,
        sources=rust_sources("candle-parity"),
    output:
        runner_binary("candle", "{device}"),
    log:
        "results/logs/build/candle-{device}.log",
    benchmark:
        "results/benchmarks/build/candle-{device}.tsv"
    localrule: True
    conda:
        "../envs/rust.yaml"
    params:
        crate="candle-parity",
        target=lambda wc: cargo_target_name(wc.device),
        features=lambda wc: cargo_features(wc.device),
        source_id=lambda wc: rust_source_id("candle-parity", cargo_features(wc.device)),
        cargo=lambda wc: cargo_command("candle-parity", cargo_features(wc.device)),
    message:
        "{params.cargo} (device {wildcards.device}), cargo target folder {params.target}"
    script:
        "../scripts/build_runner.py"


rule build_burn:
    """cargo build --release --locked of the burn runner (burn's ndarray backend: CPU only,
    so the validity matrix schedules no other device), in its own target directory so the
    candle build never waits for it.

    A local rule, like build_candle: the submit host reaches crates.io and has the Rust
    toolchain."""
    input:
        manifest=RUST_MANIFEST,
        sources=rust_sources("burn-parity"),
    output:
        runner_binary("burn", "{device}"),
    log:
        "results/logs/build/burn-{device}.log",
    benchmark:
        "results/benchmarks/build/burn-{device}.tsv"
    wildcard_constraints:
        device="cpu",
    localrule: True
    conda:
        "../envs/rust.yaml"
    params:
        crate="burn-parity",
        target=BURN_TARGET_NAME,
        features=[],
        source_id=rust_source_id("burn-parity", []),
        cargo=cargo_command("burn-parity", []),
    message:
        "{params.cargo} (device {wildcards.device}), cargo target folder {params.target}"
    script:
        "../scripts/build_runner.py"
