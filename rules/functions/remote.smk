# The input and params functions of rules/remote.smk (Snakemake's linter keeps functions
# out of a file of rules); included at its top.


REMOTE_HOSTS = config.get("remote") or {}


def remote_host(host):
    """A configured remote host's settings, else a WorkflowError naming the known ones."""
    if host not in REMOTE_HOSTS:
        raise WorkflowError(
            f"no remote host {host!r} in the config (remote: {', '.join(REMOTE_HOSTS) or 'none'})"
        )
    return REMOTE_HOSTS[host]


def require_remote_tools(host):
    """Refuse, while the DAG is built, a remote host whose job would run from a machine
    without a program it needs here (ssh, git, rsync: parity.remote.commands.LOCAL_TOOLS),
    naming the program and the host, or whose commit lacks uncommitted changes to files the
    runners are built from (parity.remote.commands.source_change_problem), before any job
    (any remote work) starts; not for a dry run."""
    from parity.remote.commands import local_tool_problem

    if workflow.is_main_process and not workflow.dryrun:
        problem = local_tool_problem(host)
        if problem:
            raise WorkflowError(problem)
        from parity.remote.commands import source_change_problem

        problem = source_change_problem(host, PARITY_DIR, checkout_commit())
        if problem:
            raise WorkflowError(problem)


def remote_fetch_inputs(wildcards):
    """A host's job reads no file; this only refuses, while the DAG is built, a host whose
    identity or ssh_config file is not there (dry runs too), whose programs are missing
    here, or whose runner sources have uncommitted changes (require_remote_tools)."""
    from parity.core.config import ConfigError
    from parity.remote.commands import settings_paths

    try:
        settings_paths(wildcards.host, remote_host(wildcards.host))
    except ConfigError as e:
        raise WorkflowError(str(e)) from None
    require_remote_tools(wildcards.host)
    return []


def checkout_commit():
    """The commit of this checkout (the workflow's folder): what each remote runs."""
    import subprocess

    try:
        proc = subprocess.run(
            ["git", "-C", PARITY_DIR, "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
        )
    except FileNotFoundError:
        raise WorkflowError(
            "remote: git is not on this machine's PATH: a remote host runs this "
            "checkout's commit; install git here or put it on PATH; nothing was run"
        ) from None
    if proc.returncode != 0:
        raise WorkflowError(
            f"remote: {PARITY_DIR} is not a git checkout with a commit: a remote host "
            f"runs this checkout's commit ({proc.stderr.strip()})"
        )
    return proc.stdout.strip()


def remote_fetch_params(host):
    """What a host's job receives (parity.remote.fetch.fetch_params)."""
    from parity.remote import fetch as remote

    settings = remote_host(host)
    require_remote_tools(host)
    return remote.fetch_params(
        PLAN,
        PROBES.for_devices(settings["devices"]).results(),
        host,
        settings,
        checkout_commit(),
        config,
    )


def crosshost_job(wildcards):
    """What a cross-host job reads (parity.remote.crosshost.crosshost_params)."""
    from parity.remote.crosshost import crosshost_params

    known_experiment(wildcards.experiment)
    settings = remote_host(wildcards.host)
    return crosshost_params(
        PLAN, wildcards.host, settings["devices"], wildcards.experiment
    )


def crosshost_inputs(wildcards):
    """This host's traces a cross-host job holds the remote's against."""
    from parity.remote.crosshost import here_traces

    return here_traces(crosshost_job(wildcards))


def remote_crosshost_jobs():
    """Every cross-host job the summary gathers, one per remote host and experiment:
    ``{"host", "experiment", "result", "job"}`` (parity.report.partial.RemoteJobs); empty without
    remote hosts."""
    from parity.remote.crosshost import crosshost_params

    return [
        {
            "host": host,
            "experiment": e,
            "result": paths.CROSSHOST_RESULT.format(experiment=e, host=host),
            "job": crosshost_params(PLAN, host, settings["devices"], e),
        }
        for host, settings in REMOTE_HOSTS.items()
        for e in PLAN.experiments
    ]


def remote_probe_hosts():
    """Remote hosts' devices for the probe table (label → devices); empty without remote
    hosts or without probes."""
    if not PROBES.probes:
        return {}
    return {host: list(s["devices"]) for host, s in REMOTE_HOSTS.items()}


def remote_manifests():
    """Every remote host's manifest (none without remote hosts)."""
    return [paths.REMOTE_MANIFEST.format(host=host) for host in REMOTE_HOSTS]


def remote_outputs():
    """The remote target: per host, its manifest and one cross-host table per experiment;
    and the summary and the probe table, which hold the hosts' cells (cpu@mac)."""
    if not REMOTE_HOSTS:
        raise WorkflowError(
            "the remote target needs remote hosts in the config (remote: {mac: {ssh: "
            "user@mac.local, path: ~/parity, devices: [metal, cpu]}}; docs/remote.md)"
        )
    out = []
    for host in REMOTE_HOSTS:
        out.append(paths.REMOTE_MANIFEST.format(host=host))
        for e in PLAN.experiments:
            for ext in ("csv", "md"):
                out.append(
                    paths.CROSSHOST_TABLE.format(experiment=e, host=host, ext=ext)
                )
    return out + summary_outputs()


def write_remote_status():
    """After a failed run (onerror): name each remote host without results and its missing
    cells (results/tables/remote.partial.csv)."""
    from parity.core import hosts
    from parity.remote import fetch as remote

    labels = {}
    for host, settings in REMOTE_HOSTS.items():
        keys = hosts.host_runs(PLAN, settings["devices"])
        labels[host] = {k.trace: remote.cell_label(k, host) for k in keys}
    rows = remote.failed_hosts_report(REMOTE_HOSTS, labels)
    if rows:
        print(remote.write_failed_hosts(rows), file=sys.stderr)
