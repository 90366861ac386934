include: "functions/fixtures.smk"


rule fixture:
    """Initial weights and data, drawn in float64 and rounded to float32 once."""
    output:
        paths.FIXTURE,
    log:
        paths.FIXTURE_LOG,
    benchmark:
        "results/benchmarks/fixture/{experiment}.tsv"
    wildcard_constraints:
        experiment=BUILTIN_EXPERIMENT,
    priority: first_result_priority
    conda:
        "../envs/analysis.yaml"
    resources:
        nice=background_nice,
    params:
        settings=fixture_settings,
        code=code("fixture.py"),
    script:
        "../scripts/fixture.py"
