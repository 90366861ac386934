# The input and params functions of rules/localise.smk (Snakemake's linter keeps functions
# out of a file of rules); included at its top.


def localisation(wildcards):
    """The Comparison a localisation job replays (by comparison name and device)."""
    known_experiment(wildcards.experiment)
    tag = (
        wildcards.device
        if wildcards.comparison == "main"
        else f"{wildcards.device}-{wildcards.comparison}"
    )
    try:
        return PLAN.comparison(wildcards.experiment, tag)
    except KeyError:
        names = sorted(
            {c.name for c in PLAN.comparisons() if c.experiment == wildcards.experiment}
        )
        raise WorkflowError(
            f"experiment {wildcards.experiment!r} has no comparison {wildcards.comparison!r} "
            f"on {wildcards.device} (its comparisons: {', '.join(names)})"
        ) from None


def localise_job(wildcards):
    """What a localisation job receives: the comparison job's params (Plan.comparison_job),
    whose ``localise`` part holds the runs' settings and the replays."""
    return PLAN.comparison_job(localisation(wildcards))


def localise_inputs(wildcards):
    """A localisation's inputs: the comparison's per-step (and diagnosis) result, the
    fixture, the reference trace, and the runner binaries of the replays made here
    (``binaries``, each once: the float32 and float64 replays of a run share one)."""
    c = localisation(wildcards)
    out = {
        "perstep": c.result("perstep"),
        "fixture": PLAN.fixture(c.experiment),
        "reference": c.reference.trace,
    }
    if c.f64_pair:
        out["diagnosis"] = c.result("diagnosis")
    binaries = {
        PLAN.binary(key)
        for key in PLAN.replay_keys(c).values()
        if key.framework != "torch" and key.device not in PLAN.imported_devices
    }
    if binaries:
        out["binaries"] = sorted(binaries)
    return out
