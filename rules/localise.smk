# Localisation: for each comparison, a same-state replay of its first differing step in
# both frameworks (float32 and float64) and the walk that finds the first operation that
# differs (scripts/parity/localise/replay.py, scripts/parity/localise/walk.py). A comparison that passes
# as expected is localised only with config localise.all; its job then writes "skipped".


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


rule localise:
    """Replay one step of a comparison from the same state in both frameworks and name the
    first quantity (forward, backward, update) that differs while its inputs agree."""
    input:
        unpack(localise_inputs),
    output:
        csv=paths.LOCALISE_TABLE.replace("{ext}", "csv"),
        md=paths.LOCALISE_TABLE.replace("{ext}", "md"),
        html=report(
            paths.LOCALISE_TABLE.replace("{ext}", "html"),
            caption="../report/captions/localise.rst",
            category="2 Experiments",
            subcategory="{experiment}",
            labels={
                "comparison": "{comparison} {device}",
                "table": "localise",
                "kind": "table",
            },
        ),
        png=report(
            paths.LOCALISE_FIGURE.replace("{ext}", "png"),
            caption="../report/captions/localise.rst",
            category="2 Experiments",
            subcategory="{experiment}",
            labels={
                "comparison": "{comparison} {device}",
                "table": "localise",
                "kind": "figure",
            },
        ),
        svg=paths.LOCALISE_FIGURE.replace("{ext}", "svg"),
        result=paths.LOCALISE_RESULT,
    log:
        paths.LOCALISE_LOG,
    benchmark:
        paths.LOCALISE_BENCHMARK
    conda:
        "../envs/torch.yaml"
    threads: config.get("threads", 1)
    resources:
        gpu=lambda wc: int(wc.device == "cuda"),
    params:
        job=localise_job,
        code=code("localise.py"),
    script:
        "../scripts/localise.py"
