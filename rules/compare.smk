# Comparisons: a reference run against a candidate run, per experiment and device. Two jobs
# per comparison: perstep, and with float64 runs float64 (the split and the diagnosis, which
# read the same four traces). Each receives its comparison, what every trace must carry and
# the diagnosis settings as params (Plan.comparison_job) and draws its own figures from the
# rows it computed; the outputs of each table are table_outputs(kind).


rule perstep:
    """Per-step loss and max|dparam| of a pair, with the step-0 identity check and the
    first step beyond the tolerance; its table and figure."""
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


rule float64:
    """The float64 split and the diagnosis of one comparison: the split (rounding, each f32
    run against its own f64 run, versus formula, f64 against f64) and why the pair differs
    (ULP and RMSE, where f64 leaves float64 rounding, signed-error agreement, the
    fp64-referenced rule, ReLU flips), from the four traces read in one job; both tables
    and figures."""
    input:
        unpack(float64_inputs),
    output:
        **table_outputs("split", prefix="split_"),
        **table_outputs("diagnosis", prefix="diagnosis_"),
    log:
        paths.fill(paths.COMPARE_LOG, kind="float64"),
    benchmark:
        paths.fill(paths.COMPARE_BENCHMARK, kind="float64")
    conda:
        "../envs/analysis.yaml"
    params:
        job=comparison_job,
        code=code("compare_float64.py"),
    script:
        "../scripts/compare_float64.py"
