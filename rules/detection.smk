# Detection power (docs/detection.md): every fault instance against its clean run,
# the detection table with the false alarms of the correct pairs, and the learning-rate
# sensitivity. Target `faults`; not in the default target.


include: "functions/detection.smk"


rule detection:
    """Which criterion detects each fault instance, and which flags a correct pair."""
    input:
        PLAN.detection_inputs(),
    output:
        csv="results/tables/detection.csv",
        md="results/tables/detection.md",
        html=report(
            "results/tables/detection.html",
            caption="../report/captions/detection.rst",
            category="6 Detection",
            labels={"table": "detection", "kind": "table"},
        ),
        alarms_csv="results/tables/false_alarms.csv",
        alarms_md="results/tables/false_alarms.md",
        alarms_html=report(
            "results/tables/false_alarms.html",
            caption="../report/captions/false_alarms.rst",
            category="6 Detection",
            labels={"table": "false alarms", "kind": "table"},
        ),
        png=report(
            "results/figures/detection.png",
            caption="../report/captions/detection_figure.rst",
            category="6 Detection",
            labels={"table": "detection", "kind": "figure"},
        ),
        svg="results/figures/detection.svg",
    log:
        "results/logs/detection.log",
    benchmark:
        "results/benchmarks/detection.tsv"
    conda:
        "../envs/analysis.yaml"
    params:
        detection=PLAN.detection_params(),
        code=code("detection.py"),
    script:
        "../scripts/detection.py"


rule sensitivity:
    """The smallest relative learning-rate error the tolerance detects: real runs with
    lr·(1 + δ), one per decade of δ, then bisection on log10 δ."""
    input:
        unpack(sensitivity_inputs),
    output:
        csv=SENSITIVITY_OUTPUTS[0],
        md=SENSITIVITY_OUTPUTS[1],
        html=report(
            SENSITIVITY_OUTPUTS[2],
            caption="../report/captions/sensitivity.rst",
            category="6 Detection",
            labels={"table": "sensitivity", "kind": "table"},
        ),
        png=report(
            SENSITIVITY_OUTPUTS[3],
            caption="../report/captions/sensitivity_figure.rst",
            category="6 Detection",
            labels={"table": "sensitivity", "kind": "figure"},
        ),
        svg=SENSITIVITY_OUTPUTS[4],
    log:
        "results/logs/sensitivity.log",
    benchmark:
        "results/benchmarks/sensitivity.tsv"
    conda:
        "../envs/torch.yaml"
    threads: config.get("threads", 1)
    params:
        settings=PLAN.sensitivity_params(),
        code=code("sensitivity.py"),
    script:
        "../scripts/sensitivity.py"


rule faults:
    """Target: the detection table and figure, and the sensitivity search when configured."""
    input:
        rules.detection.output,
        SENSITIVITY_OUTPUTS if PLAN.sensitivity else [],
