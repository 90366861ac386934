# The input and params functions of rules/train.smk (Snakemake's linter keeps functions
# out of a file of rules); included at its top.


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


def own_check_of_run(wildcards):
    """An own model's Rust run waits for its port's check (rules/own.smk); nothing else."""
    if wildcards.experiment not in OWN_EXPERIMENTS:
        return []
    framework = wildcards.run.split("_", 1)[0]
    return paths.fill(
        paths.OWN_CHECK,
        experiment=wildcards.experiment,
        framework=framework,
        device=wildcards.device,
    )


def run_binary(wildcards):
    """The binary a Rust run's job starts: its release's build for the device."""
    return PLAN.binary(
        RunKey(wildcards.experiment, wildcards.run, wildcards.dtype, wildcards.device)
    )


def run_identity(wildcards):
    """What a Rust run's job holds its binary's build record to (Plan.build_identity): the
    binary's name and source id as this checkout and config build it."""
    return PLAN.build_identity(
        RunKey(wildcards.experiment, wildcards.run, wildcards.dtype, wildcards.device)
    )
