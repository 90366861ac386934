rule figure:
    """A table drawn against the step, log-scale y, one line per column."""
    input:
        unpack(figure_inputs),
    output:
        png="results/figures/{experiment}/{kind}-{tag}.png",
    log:
        "results/logs/figure/{experiment}/{kind}-{tag}.log",
    benchmark:
        "results/benchmarks/figure/{experiment}/{kind}-{tag}.tsv"
    conda:
        "../envs/analysis.yaml"
    params:
        tolerance=lambda wc: comparison(wc).tolerance,
        title=lambda wc: f"{wc.experiment} {wc.kind} {wc.tag}",
        code=ANALYSIS_CODE,
    script:
        "../scripts/figure.py"
