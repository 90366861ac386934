# Comparisons: a reference run against a candidate run, per experiment and device. One job
# per comparison, drawing its own figures from the rows it computed: compare (the per-step
# table, and from the four traces the float64 split and the diagnosis) for a comparison with
# float64 runs, perstep (the per-step table alone) for one without (a run with no float64,
# such as candle's fused norm). Their tag constraints (float32_only_tag) give every per-step
# file one maker. Both receive the comparison, what every trace must carry and the diagnosis
# settings as params (Plan.comparison_job); the outputs of each table are table_outputs(kind).


def comparison(wildcards):
    """The Comparison a table job computes."""
    known_experiment(wildcards.experiment)
    try:
        return PLAN.comparison(wildcards.experiment, wildcards.tag)
    except KeyError:
        tags = sorted(
            c.tag for c in PLAN.comparisons() if c.experiment == wildcards.experiment
        )
        raise WorkflowError(
            f"experiment {wildcards.experiment!r} has no comparison with file tag "
            f"{wildcards.tag!r} (its tags: {', '.join(tags)})"
        ) from None


def comparison_job(wildcards):
    """What a comparison job receives: the comparison, what each trace must carry, the
    model and the diagnosis settings (Plan.comparison_job); a change reruns it."""
    return PLAN.comparison_job(comparison(wildcards))


def compare_inputs(float64):
    """The input function of the comparisons with float64 runs (``float64`` true, for rule
    ``compare``; their four traces by role) or of those without (``perstep``; the two
    float32 traces), and the fixture. Each refuses the other's comparisons: the tag
    constraints (float32_only_tag) already keep per-step files apart, and a split or
    diagnosis table asked of a comparison without float64 runs gets the reason."""

    def inputs(wildcards):
        c = comparison(wildcards)
        if float64 and c.f64_pair is None:
            raise WorkflowError(
                f"{c.experiment} {c.tag} has no float64 runs (run {c.reference.run} or "
                f"{c.candidate.run} has no float64), so no split or diagnosis table; its "
                f"per-step table is made by rule perstep"
            )
        if not float64 and c.f64_pair is not None:
            raise WorkflowError(
                f"{c.experiment} {c.tag} has float64 runs: its tables are made by rule compare"
            )
        return {
            **{role: k.trace for role, k in c.keys.items()},
            "fixture": PLAN.fixture(c.experiment),
        }

    return inputs


def float32_only_tag(only):
    """The ``tag`` constraint of the comparison rules, so that every per-step file has one
    maker: with ``only`` true (rule perstep) it matches exactly the tags of the comparisons
    without float64 runs (Plan.float32_only), each only right after its own experiment's
    folder and the ``perstep-`` of its file names (a lookbehind per comparison, as every
    output of a per-step table is ``…/{experiment}/perstep-{tag}.{ext}``); with ``only``
    false (rule compare) it matches every tag but those there, and still matches them in
    the split and diagnosis file names, where compare_inputs names why there is none. None
    without such comparisons: perstep then matches nothing and compare every tag."""
    import re

    at = "|".join(
        f"(?<=/{re.escape(c.experiment)}/perstep-){re.escape(c.tag)}"
        for c in PLAN.float32_only()
    )
    if not at:
        return "(?!)" if only else TAG_PATTERN
    return f"(?:{at})(?=\\.)" if only else f"(?!(?:{at})\\.){TAG_PATTERN}"


def table_outputs(kind, prefix=""):
    """The outputs of one table of a comparison job, ``kind`` perstep, split or diagnosis
    (keys prefixed with ``prefix``: the compare job writes three tables): its CSV, Markdown
    twin, HTML twin and figure (PNG in the report, SVG), and its machine-readable result.
    Each kind has its own captions (report/captions/{kind}.rst, {kind}_figure.rst)."""
    table = lambda ext: paths.fill(paths.TABLE, kind=kind, ext=ext)
    figure = lambda ext: paths.fill(paths.FIGURE, kind=kind, ext=ext)
    out = {
        "csv": table("csv"),
        "md": table("md"),
        "html": report(
            table("html"),
            caption=f"../report/captions/{kind}.rst",
            category="2 Experiments",
            subcategory="{experiment}",
            labels={"comparison": "{tag}", "table": kind, "kind": "table"},
        ),
        "result": paths.fill(paths.COMPARE_RESULT, kind=kind),
        "png": report(
            figure("png"),
            caption=f"../report/captions/{kind}_figure.rst",
            category="2 Experiments",
            subcategory="{experiment}",
            labels={"comparison": "{tag}", "table": kind, "kind": "figure"},
        ),
        "svg": figure("svg"),
    }
    return {prefix + k: v for k, v in out.items()}


rule compare:
    """Every table of a comparison with float64 runs: per-step loss and max|dparam| with the
    step-0 identity check and the first step beyond the tolerance; the float64 split
    (rounding, each f32 run against its own f64 run, versus formula, f64 against f64); and
    why the pair differs (ULP and RMSE, where f64 leaves float64 rounding, signed-error
    agreement, the fp64-referenced rule, ReLU flips). Tables and figures."""
    input:
        unpack(compare_inputs(float64=True)),
    output:
        **table_outputs("perstep"),
        **table_outputs("split", prefix="split_"),
        **table_outputs("diagnosis", prefix="diagnosis_"),
    log:
        paths.fill(paths.COMPARE_LOG, kind="compare"),
    benchmark:
        paths.fill(paths.COMPARE_BENCHMARK, kind="compare")
    wildcard_constraints:
        tag=float32_only_tag(only=False),
    conda:
        "../envs/analysis.yaml"
    params:
        job=comparison_job,
        code=code("compare.py"),
    script:
        "../scripts/compare.py"


rule perstep:
    """The per-step table of a comparison without float64 runs, and its figure."""
    input:
        unpack(compare_inputs(float64=False)),
    output:
        **table_outputs("perstep"),
    log:
        paths.fill(paths.COMPARE_LOG, kind="perstep"),
    benchmark:
        paths.fill(paths.COMPARE_BENCHMARK, kind="perstep")
    wildcard_constraints:
        tag=float32_only_tag(only=True),
    conda:
        "../envs/analysis.yaml"
    params:
        job=comparison_job,
        code=code("compare.py"),
    script:
        "../scripts/compare.py"
