# One job per (experiment, run, dtype, device). A run's name starts with its framework.
# Each job receives its run's resolved settings as params (Plan.run_settings).


def run_settings(wildcards):
    """The resolved settings a training job receives (Plan.run_settings)."""
    known_experiment(wildcards.experiment)
    try:
        return PLAN.run_settings(wildcards.experiment, wildcards.run)
    except KeyError:
        runs = PLAN.experiments[wildcards.experiment]["runs"]
        raise WorkflowError(
            f"experiment {wildcards.experiment!r} has no run {wildcards.run!r} "
            f"(its runs: {', '.join(runs)})"
        ) from None


def run_binary(wildcards):
    """The binary a Rust run's job starts: its release's build for the device."""
    return PLAN.binary(
        RunKey(wildcards.experiment, wildcards.run, wildcards.dtype, wildcards.device)
    )


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
        run="torch(_[a-z0-9]+)*",
        device=LOCAL_DEVICES,
    conda:
        "../envs/torch.yaml"
    threads: config.get("threads", 1)
    resources:
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
    output:
        trace=paths.TRACE,
    log:
        paths.TRAIN_LOG,
    benchmark:
        paths.TRAIN_BENCHMARK
    wildcard_constraints:
        run="candle(_[a-z0-9]+)*",
        device=LOCAL_DEVICES,
    conda:
        "../envs/analysis.yaml"
    threads: config.get("threads", 1)
    resources:
        gpu=lambda wc: int(wc.device == "cuda"),
    params:
        settings=run_settings,
        code=code("train_rust.py"),
    script:
        "../scripts/train_rust.py"


use rule train_candle as train_burn with:
    input:
        fixture=paths.FIXTURE,
        binary=run_binary,
    wildcard_constraints:
        run="burn(_[a-z0-9]+)*",
        device="cpu",
