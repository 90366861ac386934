# Comparisons: a reference run against a candidate run, per experiment and device. One job
# per comparison, drawing its own figures from the rows it computed: compare (the per-step
# table, and from the four traces the float64 split and the diagnosis) for a comparison with
# float64 runs, perstep (the per-step table alone) for one without (a run with no float64,
# such as candle's fused norm). Their tag constraints (float32_only_tag) give every per-step
# file one maker. Both receive the comparison, what every trace must carry and the diagnosis
# settings as params (Plan.comparison_job); the outputs of each table are table_outputs(kind).


include: "functions/compare.smk"


rule compare:
    """Every table of a comparison with float64 runs: per-step loss and max|dparam| with the
    step-0 identity check and the first step beyond the tolerance; the float64 split
    (rounding, each f32 run against its own f64 run, versus formula, f64 against f64); and
    why the pair differs (ULP and RMSE, where f64 leaves float64 rounding, signed-error
    agreement, the fp64-referenced rule, ReLU flips). Tables and figures."""
    input:
        unpack(compare_inputs(float64=True)),
    output:
        **table_outputs("perstep"),
        **table_outputs("split", prefix="split_"),
        **table_outputs("diagnosis", prefix="diagnosis_"),
    log:
        paths.fill(paths.COMPARE_LOG, kind="compare"),
    benchmark:
        paths.fill(paths.COMPARE_BENCHMARK, kind="compare")
    wildcard_constraints:
        tag=float32_only_tag(only=False),
    priority: first_result_priority
    conda:
        "../envs/analysis.yaml"
    resources:
        nice=background_nice,
    params:
        job=comparison_job,
        code=code("compare.py"),
    script:
        "../scripts/compare.py"


rule perstep:
    """The per-step table of a comparison without float64 runs, and its figure."""
    input:
        unpack(compare_inputs(float64=False)),
    output:
        **table_outputs("perstep"),
    log:
        paths.fill(paths.COMPARE_LOG, kind="perstep"),
    benchmark:
        paths.fill(paths.COMPARE_BENCHMARK, kind="perstep")
    wildcard_constraints:
        tag=float32_only_tag(only=True),
    priority: first_result_priority
    conda:
        "../envs/analysis.yaml"
    resources:
        nice=background_nice,
    params:
        job=comparison_job,
        code=code("compare.py"),
    script:
        "../scripts/compare.py"
