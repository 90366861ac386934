# Localisation: for each comparison, a same-state replay of its first differing step in
# both frameworks (float32 and float64) and the walk that finds the first operation that
# differs (scripts/parity/localise/replay.py, scripts/parity/localise/walk.py). A comparison that passes
# as expected is localised only with config localise.all; its job then writes "skipped".
# Only a localised comparison has rows, so its CSV and its figure (results/figures/
# {experiment}/localise-*.png, .svg) are not declared outputs: the job writes them when it
# localised, records them in its sealed result (which check verifies) and embeds the PNG
# in the HTML table, the report's item.


include: "functions/localise.smk"


rule localise:
    """Replay one step of a comparison from the same state in both frameworks and name the
    first quantity (forward, backward, update) that differs while its inputs agree."""
    input:
        unpack(localise_inputs),
    output:
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
