# Op probes: one job per (probe, framework, dtype, device), then one table. What a probe
# means lives in scripts/parity/probes.py; the probe files are probes/*.yaml. Each job
# receives its normalized probe as params.


rule probe_torch:
    """A probe run with PyTorch, written as probe results."""
    input:
        probe=probe_file,
    output:
        result=probe_path(paths.PROBE_RESULT, "torch"),
    log:
        probe_path(paths.PROBE_LOG, "torch"),
    benchmark:
        probe_path(paths.PROBE_BENCHMARK, "torch")
    wildcard_constraints:
        device=LOCAL_DEVICES,
    conda:
        "../envs/torch.yaml"
    threads: config.get("threads", 1)
    resources:
        gpu=lambda wc: int(wc.device == "cuda"),
    params:
        probe=probe_params("torch"),
        code=code("probe_torch.py"),
    script:
        "../scripts/probe_torch.py"


rule probe_candle:
    """A probe run with the candle binary built for the device, written as probe results."""
    input:
        probe=probe_file,
        binary=runner_binary("candle", "{device}"),
    output:
        result=probe_path(paths.PROBE_RESULT, "candle"),
    log:
        probe_path(paths.PROBE_LOG, "candle"),
    benchmark:
        probe_path(paths.PROBE_BENCHMARK, "candle")
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
        code=code("probe_rust.py"),
    script:
        "../scripts/probe_rust.py"


use rule probe_candle as probe_burn with:
    """A probe run with the burn binary (burn's ndarray backend: CPU only, so the validity
    matrix schedules no other device), written as probe results; an op burn's API lacks is
    an `unsupported` row."""
    input:
        probe=probe_file,
        binary=runner_binary("burn", "{device}"),
    output:
        result=probe_path(paths.PROBE_RESULT, "burn"),
    log:
        probe_path(paths.PROBE_LOG, "burn"),
    benchmark:
        probe_path(paths.PROBE_BENCHMARK, "burn")
    wildcard_constraints:
        device="cpu",
    params:
        probe=probe_params("burn"),
        framework="burn",
        code=code("probe_rust.py"),


rule probes_table:
    """Every probe result against its reference: values, max difference and verdict."""
    input:
        results=PROBES.results(),
        probes=[p.path for p in PROBES.probes.values()],
    output:
        csv=paths.PROBES_TABLE.format(ext="csv"),
        md=paths.PROBES_TABLE.format(ext="md"),
        html=report(
            paths.PROBES_TABLE.format(ext="html"),
            caption="../report/captions/probes.rst",
            category="3 Probes",
            labels={"table": "probes"},
        ),
        sources=paths.PROBES_SOURCES,
    log:
        "results/logs/probes/table.log",
    benchmark:
        "results/benchmarks/probes/table.tsv"
    conda:
        "../envs/analysis.yaml"
    params:
        plan=PROBES.to_params(),
        code=code("probes_table.py"),
    script:
        "../scripts/probes_table.py"
