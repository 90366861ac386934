def fixture_settings(wildcards):
    """What a fixture job draws from (Plan.fixture_settings)."""
    return PLAN.fixture_settings(known_experiment(wildcards.experiment))


rule fixture:
    """Initial weights and data, drawn in float64 and rounded to float32 once."""
    output:
        paths.FIXTURE,
    log:
        "results/logs/fixture/{experiment}.log",
    benchmark:
        "results/benchmarks/fixture/{experiment}.tsv"
    conda:
        "../envs/analysis.yaml"
    params:
        settings=fixture_settings,
        code=code("fixture.py"),
    script:
        "../scripts/fixture.py"
