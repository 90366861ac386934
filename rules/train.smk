# One job per (experiment, run, dtype, device). A run's name starts with its framework.


rule train_torch:
    """A PyTorch run, written as a Parquet trace."""
    input:
        fixture="results/fixtures/{experiment}.safetensors",
    output:
        trace=TRACE,
    log:
        TRAIN_LOG,
    benchmark:
        "results/benchmarks/train/{experiment}/{run}-{dtype}-{device}.tsv"
    wildcard_constraints:
        run="torch(_[a-z0-9]+)*",
        device=LOCAL_DEVICES,
    conda:
        "../envs/torch.yaml"
    threads: config.get("threads", 1)
    resources:
        gpu=lambda wc: int(wc.device == "cuda"),
    params:
        settings=lambda wc: PLAN.run_settings(wc.experiment, wc.run),
        code=TRACE_CODE,
    script:
        "../scripts/train_torch.py"


rule train_candle:
    """A candle run (the candle-parity binary), written as a Parquet trace."""
    input:
        fixture="results/fixtures/{experiment}.safetensors",
        binary=runner_binary("candle", "{device}"),
    output:
        trace=TRACE,
    log:
        TRAIN_LOG,
    benchmark:
        "results/benchmarks/train/{experiment}/{run}-{dtype}-{device}.tsv"
    wildcard_constraints:
        run="candle(_[a-z0-9]+)*",
        device=LOCAL_DEVICES,
    conda:
        "../envs/analysis.yaml"
    threads: config.get("threads", 1)
    resources:
        gpu=lambda wc: int(wc.device == "cuda"),
    params:
        settings=lambda wc: PLAN.run_settings(wc.experiment, wc.run),
        code=TRACE_CODE,
    script:
        "../scripts/train_rust.py"


rule train_burn:
    """A burn run (the burn-parity binary; CPU only), written as a Parquet trace."""
    input:
        fixture="results/fixtures/{experiment}.safetensors",
        binary=runner_binary("burn", "{device}"),
    output:
        trace="results/traces/{experiment}/{run}-{dtype}-{device}.parquet",
    log:
        "results/logs/train/{experiment}/{run}-{dtype}-{device}.log",
    benchmark:
        "results/benchmarks/train/{experiment}/{run}-{dtype}-{device}.tsv"
    wildcard_constraints:
        run="burn(_[a-z0-9]+)*",
    conda:
        "../envs/analysis.yaml"
    threads: config.get("threads", 1)
    resources:
        gpu=lambda wc: int(wc.device == "cuda"),
    params:
        settings=lambda wc: PLAN.run_settings(wc.experiment, wc.run),
    script:
        "../scripts/train_rust.py"
