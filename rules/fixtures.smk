rule fixture:
    """Initial weights and data, drawn in float64 and rounded to float32 once."""
    output:
        "results/fixtures/{experiment}.safetensors",
    params:
        settings=lambda wc: PLAN.fixture_settings(wc.experiment),
    log:
        "results/logs/fixture/{experiment}.log",
    benchmark:
        "results/benchmarks/fixture/{experiment}.tsv"
    script:
        "../scripts/make_fixture.py"
