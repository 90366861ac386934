rule figure:
    """A table drawn against the step, log-scale y, one line per column."""
    input:
        unpack(figure_inputs),
    output:
        png=report(
            "results/figures/{experiment}/{kind}-{tag}.png",
            caption="../report/captions/figure.rst",
            category="2 Experiments",
            subcategory="{experiment}",
            labels={"comparison": "{tag}", "table": "{kind}", "kind": "figure"},
        ),
        svg="results/figures/{experiment}/{kind}-{tag}.svg",
    log:
        "results/logs/figure/{experiment}/{kind}-{tag}.log",
    benchmark:
        "results/benchmarks/figure/{experiment}/{kind}-{tag}.tsv"
    conda:
        "../envs/analysis.yaml"
    params:
        tolerance=lambda wc: comparison(wc).tolerance,
        title=lambda wc: f"{wc.experiment} {wc.kind} {wc.tag}",
        code=code("figure.py"),
    script:
        "../scripts/figure.py"
