rule build_candle:
    """cargo build --release --locked of the candle runner, per device feature set.

    A local rule: under a cluster executor it runs on the submit host, which reaches
    crates.io (compute nodes often do not) and has the Rust toolchain; the one binary
    it builds serves every node."""
    input:
        manifest=RUST_MANIFEST,
        sources=RUST_SOURCES,
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
        target_dir=lambda wc: cargo_target_dir(wc.device),
        features=lambda wc: cargo_features(wc.device),
    shell:
        "cargo build --release --locked --manifest-path {input.manifest:q}"
        " -p candle-parity --target-dir {params.target_dir:q} {params.features:q}"
        " > {log:q} 2>&1"
        " && cp {params.target_dir:q}/release/candle-parity {output:q}.tmp"
        " && mv {output:q}.tmp {output:q}"
