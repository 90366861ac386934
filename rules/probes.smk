# Op probes: one job per (probe, framework, dtype, device), then one table. What a probe
# means lives in scripts/parity/probes.py; the probe files are probes/*.yaml.


rule probe_torch:
    """A probe run with PyTorch, written as probe results."""
    input:
        probe=probe_file,
    output:
        result="results/probes/{probe}/torch-{dtype}-{device}.parquet",
    log:
        "results/logs/probes/{probe}/torch-{dtype}-{device}.log",
    benchmark:
        "results/benchmarks/probes/{probe}/torch-{dtype}-{device}.tsv"
    wildcard_constraints:
        device=LOCAL_DEVICES,
    conda:
        "../envs/torch.yaml"
    threads: config.get("threads", 1)
    resources:
        gpu=lambda wc: int(wc.device == "cuda"),
    params:
        probe=probe_params("torch"),
    script:
        "../scripts/probe_torch.py"


rule probe_candle:
    """A probe run with the candle binary built for the device, written as probe results."""
    input:
        probe=probe_file,
        binary=runner_binary("candle", "{device}"),
    output:
        result="results/probes/{probe}/candle-{dtype}-{device}.parquet",
    log:
        "results/logs/probes/{probe}/candle-{dtype}-{device}.log",
    benchmark:
        "results/benchmarks/probes/{probe}/candle-{dtype}-{device}.tsv"
    wildcard_constraints:
        device=LOCAL_DEVICES,
    conda:
        "../envs/analysis.yaml"
    threads: config.get("threads", 1)
    resources:
        gpu=lambda wc: int(wc.device == "cuda"),
    params:
        probe=probe_params("candle"),
        framework="candle",
    script:
        "../scripts/probe_rust.py"


rule probe_burn:
    """A probe run with the burn binary (burn's ndarray backend: CPU only, so the validity
    matrix schedules no other device), written as probe results; an op burn's API lacks is
    an `unsupported` row."""
    input:
        probe=probe_file,
        binary=runner_binary("burn", "{device}"),
    output:
        result="results/probes/{probe}/burn-{dtype}-{device}.parquet",
    log:
        "results/logs/probes/{probe}/burn-{dtype}-{device}.log",
    benchmark:
        "results/benchmarks/probes/{probe}/burn-{dtype}-{device}.tsv"
    wildcard_constraints:
        device="cpu",
    conda:
        "../envs/analysis.yaml"
    threads: config.get("threads", 1)
    params:
        probe=probe_params("burn"),
        framework="burn",
    script:
        "../scripts/probe_rust.py"


rule probes_table:
    """Every probe result against its reference: values, max difference and verdict."""
    input:
        results=PROBES.results(),
        probes=[p.path for p in PROBES.probes.values()],
    output:
        csv="results/tables/probes.csv",
        md="results/tables/probes.md",
        html=report(
            "results/tables/probes.html",
            caption="../report/captions/probes.rst",
            category="3 Probes",
            labels={"table": "probes"},
        ),
    log:
        "results/logs/probes/table.log",
    benchmark:
        "results/benchmarks/probes/table.tsv"
    conda:
        "../envs/analysis.yaml"
    params:
        plan=PROBES.to_params(),
        code=ANALYSIS_CODE,
    script:
        "../scripts/probes_table.py"
