# Op probes: one job per batch, (framework, dtype, device), running every probe file in
# one process (PyTorch imported once, a runner binary started once), whose outputs are
# still one result per (probe, framework, dtype, device); then one table. A batch job
# takes each unchanged probe's result from its content cache (parity.probe.batch), so
# editing one probe file reruns the batches but recomputes only that probe. What a probe
# means lives in scripts/parity/probe/format.py (read by loader.py); the probe files are
# probes/*.yaml. Each job receives its normalized probes as params. Without probes there
# are no probe jobs.


include: "functions/probes.smk"


if PROBES.probes:

    rule probe_torch:
        """Every probe with PyTorch in one dtype on one device, in one interpreter,
        written as probe results (one file per probe)."""
        input:
            probes=probe_files(),
        output:
            probe_batch_results("torch"),
        log:
            probe_path(paths.PROBE_LOG, "torch"),
        benchmark:
            probe_path(paths.PROBE_BENCHMARK, "torch")
        wildcard_constraints:
            device=LOCAL_DEVICES,
            dtype=PROBE_DTYPES,
        conda:
            "../envs/torch.yaml"
        threads: config.get("threads", 1)
        resources:
            gpu=lambda wc: int(wc.device == "cuda"),
        params:
            probes=probe_batch_params("torch"),
            # the installed torch release: an upgrade reruns the batch
            torch_version=versions.torch_version(),
            code=code("probe_torch.py"),
        script:
            "../scripts/probe_torch.py"

    rule probe_candle:
        """Every probe with the candle binary built for the device, in one run of it,
        written as probe results (one file per probe)."""
        input:
            probes=probe_files(),
            binary=probe_binary("candle"),
        output:
            probe_batch_results("candle"),
        log:
            probe_path(paths.PROBE_LOG, "candle"),
        benchmark:
            probe_path(paths.PROBE_BENCHMARK, "candle")
        wildcard_constraints:
            device=LOCAL_DEVICES,
            dtype=PROBE_DTYPES,
        conda:
            "../envs/analysis.yaml"
        threads: config.get("threads", 1)
        resources:
            gpu=lambda wc: int(wc.device == "cuda"),
        params:
            probes=probe_batch_params("candle"),
            release=probe_release("candle"),
            build=probe_build("candle"),
            code=code("probe_rust.py"),
        script:
            "../scripts/probe_rust.py"

    use rule probe_candle as probe_candle_release with:
        """Every probe with the candle binary of a further release (config
        candle.versions), as probe_candle."""
        output:
            probe_batch_results("candle_v{release}"),
        log:
            probe_path(paths.PROBE_LOG, "candle_v{release}"),
        benchmark:
            probe_path(paths.PROBE_BENCHMARK, "candle_v{release}")
        wildcard_constraints:
            device=LOCAL_DEVICES,
            dtype=PROBE_DTYPES,
            release="[0-9a-z_]+",

    use rule probe_candle as probe_burn with:
        """Every probe with the burn binary (burn's ndarray backend: CPU only, so the
        validity matrix schedules no other device), in one run of it, written as probe
        results; an op burn's API lacks is an `unsupported` row."""
        input:
            probes=probe_files(),
            binary=probe_binary("burn"),
        output:
            probe_batch_results("burn"),
        log:
            probe_path(paths.PROBE_LOG, "burn"),
        benchmark:
            probe_path(paths.PROBE_BENCHMARK, "burn")
        wildcard_constraints:
            device="cpu",
            dtype=PROBE_DTYPES,
        params:
            probes=probe_batch_params("burn"),
            release=probe_release("burn"),
            build=probe_build("burn"),
            code=code("probe_rust.py"),

    use rule probe_burn as probe_burn_release with:
        """Every probe with the burn binary of a further release (config burn.versions),
        as probe_burn."""
        output:
            probe_batch_results("burn_v{release}"),
        log:
            probe_path(paths.PROBE_LOG, "burn_v{release}"),
        benchmark:
            probe_path(paths.PROBE_BENCHMARK, "burn_v{release}")
        wildcard_constraints:
            device="cpu",
            dtype=PROBE_DTYPES,
            release="[0-9a-z_]+",


rule probes_table:
    """Every probe result against its reference: values, max difference and verdict."""
    input:
        results=PROBES.results(),
        probes=[p.path for p in PROBES.probes.values()],
        manifests=remote_manifests(),
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
        remote=remote_probe_hosts(),
        code=code("probes_table.py"),
    script:
        "../scripts/probes_table.py"
