# The input and params functions of rules/fuzz.smk (Snakemake's linter keeps functions
# out of a file of rules); included at its top.


def fuzz_settings():
    """The ``fuzz`` config block with every default filled in (ops: every op the
    generator supports), and ``releases``: framework → the releases fuzzed, every one of
    ``<framework>.versions`` (``fuzz.releases: all``, the default) or its primary one
    (``primary``); a finding is matched with the known bugs of its own release."""
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
        "releases": "all",
        **{k: v for k, v in given.items() if v is not None},
    }
    unknown = sorted(set(settings["ops"]) - set(SUPPORTED_OPS))
    if unknown:
        raise WorkflowError(
            "invalid config (nothing was run):\n  config: fuzz.ops: the fuzzer does not "
            f"generate {', '.join(unknown)}; it generates {', '.join(SUPPORTED_OPS)}"
        )
    which = settings["releases"]
    settings["releases"] = {
        fw: (
            versions.configured(config)[fw]
            if which == "all"
            else [versions.primary(config, fw)]
        )
        for fw in settings["frameworks"]
    }
    return settings


def fuzz_binaries():
    """The Rust runners the fuzz job starts: one per framework of ``fuzz.frameworks`` and
    release fuzzed, in that order (``parity.fuzz.job.targets``)."""
    settings = fuzz_settings()
    return [
        runner_binary(fw, "cpu", release)
        for fw in settings["frameworks"]
        for release in settings["releases"][fw]
    ]


def fuzz_builds():
    """Param ``builds`` of the fuzz job: what each runner of :func:`fuzz_binaries` (in its
    order) holds its build record to (runner_identity): the binary's name and source id as
    this checkout and config build that release for the CPU."""
    settings = fuzz_settings()
    return [
        runner_identity(fw, release, "cpu")
        for fw in settings["frameworks"]
        for release in settings["releases"][fw]
    ]


def fuzz_known_folder():
    """The folder whose probes' ``known_bug`` entries the findings are matched with
    (``fuzz.known_bugs``, relative to the workflow's folder; default ``probes``)."""
    folder = fuzz_settings()["known_bugs"]
    return folder if os.path.isabs(folder) else os.path.join(PARITY_DIR, folder)


def fuzz_known_probes():
    """Every probe file of :func:`fuzz_known_folder`."""
    return sorted(glob.glob(os.path.join(fuzz_known_folder(), "*.yaml")))


def fuzz_seal():
    """Param ``seal`` of the fuzz job: what its record holds and what check holds that
    record to (parity.report.sealed.page_spec): the runners and known-bug probes it reads,
    the resolved fuzz settings, the code hash."""
    return sealed.page_spec(
        "fuzz",
        [*fuzz_binaries(), *fuzz_known_probes()],
        fuzz_settings(),
        code("fuzz.py"),
    )
