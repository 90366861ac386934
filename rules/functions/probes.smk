# The input and params functions of rules/probes.smk (Snakemake's linter keeps functions
# out of a file of rules); included at its top.


def probe_path(pattern, framework):
    """A probe batch's log or benchmark pattern for ``framework`` (wildcards dtype,
    device)."""
    return paths.fill(pattern, framework=framework)


def probe_batch_results(framework):
    """A probe batch's outputs: the result of every probe for ``framework``, patterns with
    the wildcards dtype and device (``ProbeKey.result``)."""
    return [
        paths.fill(paths.PROBE_RESULT, probe=p, framework=framework)
        for p in PROBES.probes
    ]


def probe_files():
    """The probe files a probe batch reads: every probe's."""
    return [PROBES.path(p) for p in PROBES.probes]


def probe_runner(framework, wildcards):
    """The runner of a probe batch: the framework, or with wildcard ``release`` (a further
    release's suffix, ``0_11_1``) that release's runner name (``candle_v0_11_1``)."""
    release = getattr(wildcards, "release", None)
    return framework if release is None else f"{framework}_v{release}"


def probe_batch_params(framework):
    """Input function: the normalized probes a batch job runs, as plain data, in
    ``ProbePlan.batches`` order. Refuses a cell of the validity matrix that cannot run
    (float64 on Metal), a release the config does not list, and a batch whose probes are
    not every probe (the rules' outputs are every probe's result)."""

    def params(wildcards):
        runner = probe_runner(framework, wildcards)
        reason = PROBES.unsupported(
            ProbeKey("", framework, wildcards.dtype, wildcards.device)
        )
        if reason is not None:
            raise WorkflowError(
                f"probes: {runner} {wildcards.dtype} {wildcards.device} cannot run: {reason}"
            )
        # a per-device target (`snakemake cuda`) may name a device the config's
        # `devices` leaves out: its batches are those of the plan on that device too
        plan = PROBES
        if wildcards.device not in PROBES.devices:
            plan = PROBES.for_devices([*PROBES.devices, wildcards.device])
        keys = plan.batches().get((runner, wildcards.dtype, wildcards.device))
        names = [k.probe for k in keys or []]
        if sorted(names) != sorted(PROBES.probes):
            raise WorkflowError(
                f"probes: the {runner} {wildcards.dtype} {wildcards.device} batch runs "
                f"{names or 'nothing'}, not every probe"
            )
        return [PROBES.probe(n).as_params() for n in names]

    return params


def probe_binary(framework):
    """Input function: the binary of a Rust probe batch's release for its device."""

    def binary(wildcards):
        try:
            _, version = PROBES.release_of(probe_runner(framework, wildcards))
        except KeyError as e:
            raise WorkflowError(f"probes: {e.args[0]}") from None
        return runner_binary(framework, wildcards.device, version or None)

    return binary


def probe_build(framework):
    """Param function: what a Rust probe batch holds its binary's build record to
    (runner_identity): the binary's name and source id as this checkout and config build
    its release for its device."""

    def build(wildcards):
        _, version = PROBES.release_of(probe_runner(framework, wildcards))
        release = version or versions.primary(config, framework)
        return runner_identity(framework, release, wildcards.device)

    return build


def probe_release(framework):
    """Param function: a Rust probe batch's (framework, version); version "" for the
    primary release (ProbeKey.version)."""
    return lambda wildcards: list(PROBES.release_of(probe_runner(framework, wildcards)))
