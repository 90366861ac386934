# Training-step parity between PyTorch and candle: the DAG reads top to bottom.
#   fixtures → build → train (one job per experiment × run × dtype × device)
#   → compare (one job per comparison: per-step, float64 split, diagnosis; their figures)
#   → localise (same-state replay of the first differing step: the first op that differs)
#   → summary, framework table, optimizer defaults → check
#   probes (one job per framework × dtype × device running every probe) → probes table
#   target faults (not default): fault instances → detection table; lr sensitivity
#   target fuzz (not default): layout fuzzing → findings, minimal probe files, reproductions


import os

from snakemake.utils import min_version

min_version("9.0")


#: This checkout (the workflow's folder), also when the workflow is a module of another
#: (where workflow.basedir is the other's folder).
PARITY_DIR = str(workflow.current_basedir)


# The defaults, read from this checkout whatever the working directory: a config of one's
# own (--configfile) is merged over them; a module's config is merged over them in
# rules/common.smk (a module ignores this directive).
configfile: os.path.join(PARITY_DIR, "config.yaml")


report: "report/workflow.rst"


include: "rules/common.smk"
include: "rules/fixtures.smk"
include: "rules/build.smk"
include: "rules/train.smk"
include: "rules/own.smk"
include: "rules/compare.smk"
include: "rules/localise.smk"
include: "rules/remote.smk"
include: "rules/probes.smk"
include: "rules/summary.smk"
include: "rules/report.smk"
include: "rules/devices.smk"
include: "rules/detection.smk"
include: "rules/fuzz.smk"


# What the rules' code versions and probe files gave, written once for the next start and
# for jobs that read this Snakefile again (parity.core.memo).
MEMO.save()


onerror:
    write_partial_summary()
    write_remote_status()


rule all:
    default_target: True
    input:
        lambda wc: all_outputs(),
