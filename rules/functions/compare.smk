# The input and params functions of rules/compare.smk (Snakemake's linter keeps functions
# out of a file of rules); included at its top.


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
