# Tables across comparisons: summary with verdicts, the framework table, optimizer
# defaults, the release matrix, and the check target. Each table a person reads comes
# with its sealed record (*.sources.json), which check holds it to.


include: "functions/summary.smk"


rule summary:
    """One row per comparison: worst values, tolerance, verdict and expected verdict; and
    what it was made from (summary.sources.json: the run, each result's sha256)."""
    input:
        all_results(),
    output:
        csv=paths.SUMMARY.format(ext="csv"),
        md=paths.SUMMARY.format(ext="md"),
        html=report(
            "results/tables/summary.html",
            caption="../report/captions/summary.rst",
            category="1 Summary",
            labels={"table": "summary of verdicts"},
        ),
        sources=paths.SUMMARY_SOURCES,
    log:
        "results/logs/summary.log",
    benchmark:
        "results/benchmarks/summary.tsv"
    conda:
        "../envs/analysis.yaml"
    params:
        unsupported=PLAN.unsupported_params(),
        code=code("summary.py"),
    script:
        "../scripts/summary.py"


rule framework_summary:
    """The study's "burn vs PyTorch | candle vs PyTorch" table, computed from the runs."""
    input:
        PLAN.framework_summary_inputs(),
    output:
        csv="results/tables/framework_summary.csv",
        md="results/tables/framework_summary.md",
        html=report(
            "results/tables/framework_summary.html",
            caption="../report/captions/framework_summary.rst",
            category="1 Summary",
            labels={"table": "the study's framework table"},
        ),
        record=paths.FRAMEWORK_SUMMARY_SOURCES,
    log:
        "results/logs/framework_summary.log",
    benchmark:
        "results/benchmarks/framework_summary.tsv"
    conda:
        "../envs/analysis.yaml"
    params:
        table=PLAN.framework_summary_params(),
        code=code("framework_summary.py"),
        seal=page_seal("framework_summary"),
    script:
        "../scripts/framework_summary.py"


rule optimizer_defaults_torch:
    """PyTorch's optimizer defaults, printed by torch."""
    output:
        "results/defaults/torch.json",
    log:
        "results/logs/defaults/torch.log",
    benchmark:
        "results/benchmarks/defaults/torch.tsv"
    conda:
        "../envs/torch.yaml"
    params:
        # the installed torch release: an upgrade reruns the job
        torch_version=versions.torch_version(),
    script:
        "../scripts/optimizer_defaults_torch.py"


rule optimizer_defaults_candle:
    """candle-nn's optimizer defaults, printed by the candle-parity binary."""
    input:
        binary=runner_binary("candle", "cpu"),
    output:
        "results/defaults/candle.json",
    log:
        "results/logs/defaults/candle.log",
    benchmark:
        "results/benchmarks/defaults/candle.tsv"
    conda:
        "../envs/analysis.yaml"
    params:
        build=runner_identity("candle", versions.primary(config, "candle"), "cpu"),
    script:
        "../scripts/optimizer_defaults_candle.py"


rule optimizer_defaults_burn:
    """burn's optimizer defaults, printed by the burn-parity binary from burn's configs."""
    input:
        binary=runner_binary("burn", "cpu"),
    output:
        "results/defaults/burn.json",
    log:
        "results/logs/defaults/burn.log",
    benchmark:
        "results/benchmarks/defaults/burn.tsv"
    conda:
        "../envs/analysis.yaml"
    params:
        build=runner_identity("burn", versions.primary(config, "burn"), "cpu"),
    script:
        "../scripts/optimizer_defaults_burn.py"


rule optimizer_defaults:
    """One table of every framework's optimizer defaults."""
    input:
        DEFAULTS_JSON,
    output:
        csv="results/tables/optimizer_defaults.csv",
        md="results/tables/optimizer_defaults.md",
        html=report(
            "results/tables/optimizer_defaults.html",
            caption="../report/captions/optimizer_defaults.rst",
            category="4 Training loop",
            labels={"page": "optimizer defaults"},
        ),
        record=paths.OPTIMIZER_DEFAULTS_SOURCES,
    log:
        "results/logs/defaults/table.log",
    benchmark:
        "results/benchmarks/defaults/table.tsv"
    conda:
        "../envs/analysis.yaml"
    params:
        code=code("optimizer_defaults.py"),
        seal=page_seal("optimizer_defaults"),
    script:
        "../scripts/optimizer_defaults.py"


rule check:
    """Exits non-zero when any verdict, of a comparison or of a probe, differs from its
    expectation (for CI gates); first refuses, naming each file, every table and page
    that is not what its sealed records say or was not made under this config, code and
    plan."""
    input:
        unpack(check_inputs),
    log:
        "results/logs/check.log",
    localrule: True
    conda:
        "../envs/analysis.yaml"
    params:
        plan=lambda wc: check_params(),
    script:
        "../scripts/check.py"


rule versions_table:
    """The release matrix: for each known fault (probe cases with a known bug, comparisons
    expected to fail) and each cell a release fails, which releases of candle and burn
    have it."""
    input:
        unpack(versions_table_inputs),
    output:
        csv=paths.VERSIONS_TABLE.format(ext="csv"),
        md=paths.VERSIONS_TABLE.format(ext="md"),
        html=report(
            "results/tables/versions.html",
            caption="../report/captions/versions.rst",
            category="1 Summary",
            labels={"table": "faults by release"},
        ),
        record=paths.VERSIONS_TABLE_SOURCES,
    log:
        "results/logs/versions_table.log",
    benchmark:
        "results/benchmarks/versions_table.tsv"
    conda:
        "../envs/analysis.yaml"
    params:
        matrix=report_versions.plan_params(PLAN, PROBES if PROBES.probes else None),
        code=code("versions_table.py"),
        seal=page_seal("versions"),
    script:
        "../scripts/versions_table.py"
