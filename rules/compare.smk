# Comparisons: a reference run against a candidate run, per experiment and device.


rule perstep:
    """Per-step loss and max|dparam| of a pair, with the step-0 identity check."""
    input:
        reference=lambda wc: comparison(wc).reference.trace,
        candidate=lambda wc: comparison(wc).candidate.trace,
        fixture="results/fixtures/{experiment}.safetensors",
    output:
        csv="results/tables/{experiment}/perstep-{tag}.csv",
        md="results/tables/{experiment}/perstep-{tag}.md",
        html=report(
            "results/tables/{experiment}/perstep-{tag}.html",
            caption="../report/captions/table.rst",
            category="2 Experiments",
            subcategory="{experiment}",
            labels={"comparison": "{tag}", "table": "perstep", "kind": "table"},
        ),
        result="results/compare/{experiment}/perstep-{tag}.json",
    log:
        compare_log("perstep"),
    benchmark:
        "results/benchmarks/perstep/{experiment}/{tag}.tsv"
    conda:
        "../envs/analysis.yaml"
    params:
        comparison=comparison_params,
        code=ANALYSIS_CODE,
    script:
        "../scripts/compare_perstep.py"


rule split:
    """The float64 split: rounding (each f32 run against its own f64 run) versus
    formula (f64 against f64)."""
    input:
        unpack(split_traces),
    output:
        csv="results/tables/{experiment}/split-{tag}.csv",
        md="results/tables/{experiment}/split-{tag}.md",
        html=report(
            "results/tables/{experiment}/split-{tag}.html",
            caption="../report/captions/table.rst",
            category="2 Experiments",
            subcategory="{experiment}",
            labels={"comparison": "{tag}", "table": "split", "kind": "table"},
        ),
        result="results/compare/{experiment}/split-{tag}.json",
    log:
        compare_log("split"),
    benchmark:
        "results/benchmarks/split/{experiment}/{tag}.tsv"
    conda:
        "../envs/analysis.yaml"
    params:
        comparison=comparison_params,
        code=ANALYSIS_CODE,
    script:
        "../scripts/compare_split.py"


rule diagnosis:
    """Why a pair differs: ULP and RMSE, where f64 leaves float64 rounding, signed-error
    agreement, the fp64-referenced rule, and ReLU flips."""
    input:
        unpack(split_traces),
    output:
        csv="results/tables/{experiment}/diagnosis-{tag}.csv",
        md="results/tables/{experiment}/diagnosis-{tag}.md",
        html=report(
            "results/tables/{experiment}/diagnosis-{tag}.html",
            caption="../report/captions/table.rst",
            category="2 Experiments",
            subcategory="{experiment}",
            labels={"comparison": "{tag}", "table": "diagnosis", "kind": "table"},
        ),
        result="results/compare/{experiment}/diagnosis-{tag}.json",
    log:
        compare_log("diagnosis"),
    benchmark:
        "results/benchmarks/diagnosis/{experiment}/{tag}.tsv"
    conda:
        "../envs/analysis.yaml"
    params:
        comparison=comparison_params,
        code=ANALYSIS_CODE,
        diagnosis=PLAN.diagnosis,
    script:
        "../scripts/compare_diagnosis.py"
