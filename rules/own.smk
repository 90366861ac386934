# A user's own model (family own, docs/own-model.md): its fixture from the PyTorch model's
# own initialisation, the runner that links the user's Rust crate to the pinned candle or
# burn release (one build per experiment, framework and device, whose inputs are the
# crate's sources; none for a side ported by a built-in port of the workflow's runner),
# the check of the port against the PyTorch model before any training job, and its
# PyTorch runs (the user's nn.Module). The Rust runs are train_candle and train_burn with
# the own runner (or the workflow's runner) as their binary. Without own models nothing
# here runs.


include: "functions/own.smk"


rule own_fixture:
    """An own model's initial weights, from the PyTorch model's own initialisation under the
    experiment's seed in float64, rounded to float32 once, and its data."""
    input:
        own_factory_files,
    output:
        paths.FIXTURE,
    log:
        paths.FIXTURE_LOG,
    benchmark:
        "results/benchmarks/fixture/{experiment}.tsv"
    wildcard_constraints:
        experiment=OWN_EXPERIMENT,
    priority: first_result_priority
    conda:
        "../envs/torch.yaml"
    resources:
        nice=background_nice,
    params:
        settings=fixture_settings,
        code=code("own_fixture.py"),
    script:
        "../scripts/own_fixture.py"


rule build_own:
    """The runner of an own model's Rust port: the user's crate linked against the pinned
    release by a generated runner crate, built into the workflow runner's target folder.

    A local rule, like build_candle: the submit host reaches crates.io and has the Rust
    toolchain."""
    input:
        manifest=RUST_MANIFEST,
        sources=own_crate_sources,
    output:
        paths.OWN_BINARY,
    log:
        paths.OWN_BUILD_LOG,
    benchmark:
        paths.OWN_BUILD_BENCHMARK
    wildcard_constraints:
        experiment=OWN_EXPERIMENT,
        framework="candle|burn",
    localrule: True
    conda:
        "../envs/rust.yaml"
    resources:
        cargo=1,
    params:
        build=build_own_params,
    message:
        "cargo build of the {wildcards.framework} port of {wildcards.experiment} ({wildcards.device})"
    script:
        "../scripts/build_own.py"


rule own_check:
    """The port built from the fixture against the PyTorch model: the same parameters and
    shapes, an output of the shape the loss needs; a mismatch stops here, listed, before
    any training job. Parameters without a gradient are recorded, not refused."""
    input:
        fixture=paths.FIXTURE,
        binary=own_check_binary,
    output:
        paths.OWN_CHECK,
    log:
        paths.OWN_CHECK_LOG,
    wildcard_constraints:
        experiment=OWN_EXPERIMENT,
        framework="candle|burn",
    conda:
        "../envs/analysis.yaml"
    params:
        settings=own_check_settings,
        build=own_check_build,
        code=code("own_check.py"),
    script:
        "../scripts/own_check.py"


rule train_own_torch:
    """A PyTorch run of an own model (the user's nn.Module), written as a Parquet trace."""
    input:
        fixture=paths.FIXTURE,
    output:
        trace=paths.TRACE,
    log:
        paths.TRAIN_LOG,
    benchmark:
        paths.TRAIN_BENCHMARK
    wildcard_constraints:
        experiment=OWN_EXPERIMENT,
        run="torch(_[a-z0-9]+)*",
        device=LOCAL_DEVICES,
    priority: first_result_priority
    conda:
        "../envs/torch.yaml"
    threads: config.get("threads", 1)
    resources:
        nice=background_nice,
        gpu=lambda wc: int(wc.device == "cuda"),
    params:
        settings=run_settings,
        code=code("train_own_torch.py"),
    script:
        "../scripts/train_own_torch.py"
