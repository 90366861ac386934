# Differential layout fuzzing (docs/fuzzing.md): random valid op cases whose inputs reach
# the op through random layout routes, run in PyTorch, candle and burn, failures shrunk to
# minimal probe files. Target `fuzz`; not in the default target.


def fuzz_settings():
    """The ``fuzz`` config block with every default filled in (ops: every op the
    generator supports), and ``releases``: the release fuzzed of each framework, its
    primary one (known bugs of other releases only do not cover its findings)."""
    from parity.fuzz.generate import SUPPORTED_OPS

    given = config.get("fuzz") or {}
    settings = {
        "seed": 0,
        "cases_per_op": 20,
        "ops": list(SUPPORTED_OPS),
        "frameworks": ["candle", "burn"],
        "dtypes": ["f32"],
        "shrinks_per_class": 2,
        "known_bugs": "probes",
        **{k: v for k, v in given.items() if v is not None},
    }
    unknown = sorted(set(settings["ops"]) - set(SUPPORTED_OPS))
    if unknown:
        raise WorkflowError(
            "invalid config (nothing was run):\n  config: fuzz.ops: the fuzzer does not "
            f"generate {', '.join(unknown)}; it generates {', '.join(SUPPORTED_OPS)}"
        )
    settings["releases"] = {
        fw: versions.primary(config, fw) for fw in settings["frameworks"]
    }
    return settings


def fuzz_binaries():
    """The Rust runners the fuzz job starts: one per framework of ``fuzz.frameworks``,
    in that order."""
    return [runner_binary(fw, "cpu") for fw in fuzz_settings()["frameworks"]]


def fuzz_known_folder():
    """The folder whose probes' ``known_bug`` entries the findings are matched with
    (``fuzz.known_bugs``, relative to the workflow's folder; default ``probes``)."""
    folder = fuzz_settings()["known_bugs"]
    return folder if os.path.isabs(folder) else os.path.join(workflow.basedir, folder)


def fuzz_known_probes():
    """Every probe file of :func:`fuzz_known_folder`."""
    return sorted(glob.glob(os.path.join(fuzz_known_folder(), "*.yaml")))


rule fuzz:
    """One seeded campaign: generate, check against PyTorch (float64-referenced rule), the
    PyTorch-vs-itself control, shrink, write findings, probe files and reproductions."""
    input:
        binaries=fuzz_binaries(),
        known=fuzz_known_probes(),
    output:
        csv=paths.FUZZ_FINDINGS.format(ext="csv"),
        md=paths.FUZZ_FINDINGS.format(ext="md"),
        summary=paths.FUZZ_SUMMARY,
        probes=directory(paths.FUZZ_PROBES),
        repro=directory(paths.FUZZ_REPRO),
    log:
        "results/logs/fuzz.log",
    benchmark:
        "results/benchmarks/fuzz.tsv"
    conda:
        "../envs/torch.yaml"
    threads: config.get("threads", 1)
    params:
        fuzz=fuzz_settings(),
        code=code("fuzz.py"),
    script:
        "../scripts/fuzz.py"
