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
        code=code("make_fixture.py"),
    script:
        "../scripts/make_fixture.py"
