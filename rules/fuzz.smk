# Differential layout fuzzing (docs/fuzzing.md): random valid op cases whose inputs reach
# the op through random layout routes, run in PyTorch, candle and burn, failures shrunk to
# minimal probe files. Target `fuzz`; not in the default target.


include: "functions/fuzz.smk"


rule fuzz:
    """One seeded campaign: generate, check against PyTorch (float64-referenced rule), the
    PyTorch-vs-itself control, shrink, write findings, probe files and reproductions, and
    last their sealed record (check holds them to it)."""
    input:
        binaries=fuzz_binaries(),
        known=fuzz_known_probes(),
    output:
        csv=paths.FUZZ_FINDINGS.format(ext="csv"),
        md=paths.FUZZ_FINDINGS.format(ext="md"),
        summary=paths.FUZZ_SUMMARY,
        probes=directory(paths.FUZZ_PROBES),
        repro=directory(paths.FUZZ_REPRO),
        record=paths.FUZZ_SOURCES,
    log:
        "results/logs/fuzz.log",
    benchmark:
        "results/benchmarks/fuzz.tsv"
    conda:
        "../envs/torch.yaml"
    threads: config.get("threads", 1)
    params:
        fuzz=fuzz_settings(),
        builds=fuzz_builds(),
        code=code("fuzz.py"),
        seal=fuzz_seal(),
    script:
        "../scripts/fuzz.py"
