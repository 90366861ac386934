# Remote hosts (config `remote`): `snakemake --cores 8 remote` runs each host's device
# targets in its own checkout over SSH, brings its traces and probe results back into
# results/remote/{host}/ (parity.remote.fetch) and compares them with this host's, per
# experiment (parity.remote.crosshost). The summary and the probe table gather the hosts' cells
# (device cpu@mac) when the config has remote hosts; without them nothing here runs.


#: Remote hosts by label (config `remote`): each runs its devices' jobs in its own checkout.


include: "functions/remote.smk"


rule remote_fetch:
    """One host: its checkout at this commit, its device targets run there, its results
    brought back and verified; the manifest is written last. Its input function reads
    nothing: it refuses, before any job, a host whose programs (ssh, git, rsync) are
    missing here."""
    input:
        lambda wc: remote_fetch_inputs(wc),
    output:
        manifest=paths.REMOTE_MANIFEST,
    log:
        paths.REMOTE_LOG,
    localrule: True
    conda:
        "../envs/remote.yaml"
    params:
        job=lambda wc: remote_fetch_params(wc.host),
        code=code("remote_fetch.py"),
    script:
        "../scripts/remote_fetch.py"


rule crosshost:
    """One experiment's runs made on a remote host against this host's, and its
    comparisons computed from the remote's traces."""
    input:
        manifest=paths.REMOTE_MANIFEST,
        here=lambda wc: crosshost_inputs(wc),
    output:
        csv=paths.fill(paths.CROSSHOST_TABLE, ext="csv"),
        md=paths.fill(paths.CROSSHOST_TABLE, ext="md"),
        result=paths.CROSSHOST_RESULT,
    log:
        paths.CROSSHOST_LOG,
    conda:
        "../envs/analysis.yaml"
    params:
        job=lambda wc: crosshost_job(wc),
        code=code("crosshost.py"),
    script:
        "../scripts/crosshost.py"


rule remote:
    """Every remote host's results, brought back and compared here, and the summary and
    probe table that hold them."""
    input:
        lambda wc: remote_outputs(),
    localrule: True
