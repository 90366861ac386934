# The input and params functions of rules/fuzz.smk (Snakemake's linter keeps functions
# out of a file of rules); included at its top.


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
    return folder if os.path.isabs(folder) else os.path.join(PARITY_DIR, folder)


def fuzz_known_probes():
    """Every probe file of :func:`fuzz_known_folder`."""
    return sorted(glob.glob(os.path.join(fuzz_known_folder(), "*.yaml")))
