# One job per (experiment, run, dtype, device). A run's name starts with its framework.
# Each job receives its run's resolved settings as params (Plan.run_settings).


include: "functions/train.smk"


rule train_torch:
    """A PyTorch run, written as a Parquet trace."""
    input:
        fixture=paths.FIXTURE,
    output:
        trace=paths.TRACE,
    log:
        paths.TRAIN_LOG,
    benchmark:
        paths.TRAIN_BENCHMARK
    wildcard_constraints:
        experiment=BUILTIN_EXPERIMENT,
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
        code=code("train_torch.py"),
    script:
        "../scripts/train_torch.py"


rule train_candle:
    """A candle run (the candle-parity binary of the run's release), written as a Parquet
    trace."""
    input:
        fixture=paths.FIXTURE,
        binary=run_binary,
        port_check=own_check_of_run,
    output:
        trace=paths.TRACE,
    log:
        paths.TRAIN_LOG,
    benchmark:
        paths.TRAIN_BENCHMARK
    wildcard_constraints:
        run="candle(_[a-z0-9]+)*",
        device=LOCAL_DEVICES,
    priority: first_result_priority
    conda:
        "../envs/analysis.yaml"
    threads: config.get("threads", 1)
    resources:
        nice=background_nice,
        gpu=lambda wc: int(wc.device == "cuda"),
    params:
        settings=run_settings,
        build=run_identity,
        code=code("train_rust.py"),
    script:
        "../scripts/train_rust.py"


use rule train_candle as train_burn with:
    input:
        fixture=paths.FIXTURE,
        binary=run_binary,
        port_check=own_check_of_run,
    wildcard_constraints:
        run="burn(_[a-z0-9]+)*",
        device="cpu",
