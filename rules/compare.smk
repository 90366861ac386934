# Comparisons: a reference run against a candidate run, per experiment and device. Each
# job receives its comparison, what every trace must carry and the diagnosis settings as
# params (Plan.comparison_job); its outputs are table_outputs(kind).


rule perstep:
    """Per-step loss and max|dparam| of a pair, with the step-0 identity check and the
    first step beyond the tolerance."""
    input:
        reference=lambda wc: comparison(wc).reference.trace,
        candidate=lambda wc: comparison(wc).candidate.trace,
        fixture=paths.FIXTURE,
    output:
        **table_outputs("perstep"),
    log:
        paths.fill(paths.COMPARE_LOG, kind="perstep"),
    benchmark:
        paths.fill(paths.COMPARE_BENCHMARK, kind="perstep")
    conda:
        "../envs/analysis.yaml"
    params:
        job=comparison_job,
        code=code("compare_perstep.py"),
    script:
        "../scripts/compare_perstep.py"


rule split:
    """The float64 split: rounding (each f32 run against its own f64 run) versus
    formula (f64 against f64)."""
    input:
        unpack(split_traces),
    output:
        **table_outputs("split"),
    log:
        paths.fill(paths.COMPARE_LOG, kind="split"),
    benchmark:
        paths.fill(paths.COMPARE_BENCHMARK, kind="split")
    conda:
        "../envs/analysis.yaml"
    params:
        job=comparison_job,
        code=code("compare_split.py"),
    script:
        "../scripts/compare_split.py"


rule diagnosis:
    """Why a pair differs: ULP and RMSE, where f64 leaves float64 rounding, signed-error
    agreement, the fp64-referenced rule, and ReLU flips."""
    input:
        unpack(diagnosis_inputs),
    output:
        **table_outputs("diagnosis"),
    log:
        paths.fill(paths.COMPARE_LOG, kind="diagnosis"),
    benchmark:
        paths.fill(paths.COMPARE_BENCHMARK, kind="diagnosis")
    conda:
        "../envs/analysis.yaml"
    params:
        job=comparison_job,
        code=code("compare_diagnosis.py"),
    script:
        "../scripts/compare_diagnosis.py"
