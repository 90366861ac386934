# The input and params functions of rules/own.smk (Snakemake's linter keeps functions
# out of a file of rules); included at its top.


def own_model(experiment):
    """An own-model experiment's resolved model (parity.plan.own.resolve_model)."""
    return PLAN.experiments[known_experiment(experiment)]["model"]


def own_factory_files(wildcards):
    """What an own model's fixture is drawn from besides its settings: the factory's file
    and the Python files beside it (parity.plan.own.card_key hashes the same), so an edit
    there draws it again."""
    from parity.plan.own import factory_file

    f = factory_file(own_model(wildcards.experiment)["torch"], os.getcwd())
    return [os.path.relpath(p) for p in sorted(f.parent.glob("*.py"))] if f else []


def own_runs(experiment, framework):
    """The runs of ``framework`` in an own-model experiment, in config order."""
    runs = PLAN.experiments[known_experiment(experiment)]["runs"]
    return [r for r, s in runs.items() if s["framework"] == framework]


def own_crate_sources(wildcards):
    """What an own runner's build reads: the user's crate (parity.plan.builds.crate_files),
    the workspace manifest and lock, parity-common and the framework's runner library.
    """
    from parity.plan.builds import crate_files

    crate = own_model(wildcards.experiment)[wildcards.framework]["crate"]
    ours = rust_files(f"{wildcards.framework}-parity")
    return [os.path.relpath(p) for p in crate_files(crate)] + [
        workdir_path(RUST_DIR / p) for p in ours
    ]


def build_own_params(wildcards):
    """What an own runner's build job receives (parity.train.build_own.build_own); the
    source id hashes the runner library's sources and the user's crate
    (parity.plan.builds.own_source_id, which the jobs that start the binary hold its build
    record to)."""
    model = own_model(wildcards.experiment)
    fw, device = wildcards.framework, wildcards.device
    # candle: the device's features; burn: the primary burn entry's CPU backend (ndarray, or
    # flex for a primary 0.22.1+flex), which the runner library is built with.
    features = builds.own_features(config, fw, device)
    return {
        "experiment": wildcards.experiment,
        "framework": fw,
        "crate": model[fw]["crate"],
        "model": model[fw]["model"],
        "features": features,
        "target": (
            ("-".join(sorted(features)) or "default") if fw == "candle" else "burn"
        ),
        "runner_crate": paths.fill(
            paths.OWN_RUNNER_CRATE,
            experiment=wildcards.experiment,
            framework=fw,
            device=device,
        ),
        "source_id": builds.own_source_id(fw, model[fw]["crate"], features, RUST_DIR),
    }


def own_check_settings(wildcards):
    """The settings an own port's check builds the port with: its first run's."""
    runs = own_runs(wildcards.experiment, wildcards.framework)
    if not runs:
        raise WorkflowError(
            f"experiment {wildcards.experiment!r} has no {wildcards.framework} run"
        )
    return PLAN.run_settings(wildcards.experiment, runs[0])


def own_check_binary(wildcards):
    """The runner an own port's check inspects with: its first run's binary (the own
    runner linking the user's crate, or the framework's runner for a built-in port)."""
    run = own_runs(wildcards.experiment, wildcards.framework)[0]
    return PLAN.binary(RunKey(wildcards.experiment, run, "f32", wildcards.device))


def own_check_build(wildcards):
    """What an own port's check holds its binary's build record to (Plan.build_identity of
    its first run): the binary's name and source id as this checkout and config build it.
    """
    run = own_runs(wildcards.experiment, wildcards.framework)[0]
    return PLAN.build_identity(
        RunKey(wildcards.experiment, run, "f32", wildcards.device)
    )
