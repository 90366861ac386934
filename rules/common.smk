# What every stage needs: the config validated (config files read again strictly, numbers
# finite, the schema, the Plan, sizes within limits), the plan and the probe plan, the
# wildcard constraints, each rule's code hash, and the default target's file list. Each
# stage's own input and params functions sit at the top of its rule file, before its rules
# (the rule files are included in DAG order after this one, and a rule's directives call
# them while the file is read). What an experiment means lives in scripts/parity/plan/plan/;
# result paths in scripts/parity/core/paths.py.

import copy
import glob
import json
import os
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

sys.path.insert(0, os.path.join(PARITY_DIR, "scripts"))

from parity.core import (
    configcheck,
    environment,
    integrity,
    paths,
    yamlfile,
)  # noqa: E402
from parity.plan import limits  # noqa: E402
from parity.report import versions as report_versions  # noqa: E402
from parity.plan import versions  # noqa: E402
from parity.core.codeversion import code_version  # noqa: E402
from parity.core.memo import Memo, json_key  # noqa: E402
from parity.core.config import ConfigError  # noqa: E402
from parity.core.devices import host_device_problem  # noqa: E402
from parity.core.fileio import BACKGROUND_NICE  # noqa: E402
from parity.plan.keys import RunKey  # noqa: E402
from parity.plan.plan import Plan  # noqa: E402
from parity.probe.plan import ProbeKey, ProbePlan  # noqa: E402
from parity.probe import format as probes_module  # noqa: E402
from parity.probe.format import ProbeError  # noqa: E402

#: This run's id, recorded with the tables over many results; jobs inherit it.
os.environ.setdefault(integrity.RUN_ID_ENV, integrity.new_run_id())

# As a module of another workflow (docs/own-model.md), the config is the other's alone:
# the defaults of this checkout go under it, as --configfile merges a file over them.
_DEFAULTS = os.path.join(PARITY_DIR, "config.yaml")
if _DEFAULTS not in map(os.path.abspath, workflow.configfiles):
    from snakemake.utils import update_config

    _given = copy.deepcopy(dict(config))
    _merged = yamlfile.load(_DEFAULTS)
    update_config(_merged, _given)
    config.clear()
    config.update(_merged)

#: This working folder's record of the code versions and probe files of earlier starts
#: (parity.core.memo): a no-op rerun reads them instead of hashing and validating again.
MEMO = Memo(os.getcwd())
LIMITS = limits.settings(config)
try:
    # Snakemake has parsed the config files already, keeping the last value of a key given
    # twice: read each again strictly and bounded, and bound the merged config (files and
    # --config values) before anything walks it.
    for _path in workflow.configfiles:
        yamlfile.load(_path, LIMITS["max_yaml_bytes"], LIMITS["max_yaml_nodes"])
    yamlfile.check_nodes(config, "the config", LIMITS["max_yaml_nodes"])
    limits.check_config_numbers(config)
except (yamlfile.YamlError, ConfigError) as e:
    raise WorkflowError(f"invalid config (nothing was run):\n  {e}") from None
# The JSON twin of schemas/config.schema.yaml (scripts/dev/schema_json.py): Snakemake parses
# a YAML schema with a pure-Python parser on every start: 0.09 s against 0.5 ms as JSON.
CONFIG_SCHEMA = os.path.join(PARITY_DIR, "schemas", "config.schema.json")


def _validated(given):
    """``given`` checked against the config schema, the schema's defaults filled in."""
    validate(given, CONFIG_SCHEMA)
    return given


# Free text written as a folded YAML block (note: >) loses its final line break before the
# schema, which refuses a line break in text, sees it (parity.core.configcheck.fold_text).
configcheck.fold_text(
    config, json.loads(Path(CONFIG_SCHEMA).read_text(encoding="utf-8"))
)
try:
    # A config validated before (the same config and schema) is taken from the record.
    _key = json_key(dict(config))
    if _key is None:
        validate(config, CONFIG_SCHEMA)
    else:
        _checked = MEMO.get(
            "config", _key, lambda: _validated(copy.deepcopy(dict(config)))
        )
        config.clear()
        config.update(copy.deepcopy(_checked))
except WorkflowError:
    # Snakemake's message prints the whole sub-schema; say where and why instead.
    from parity.core.configcheck import schema_errors

    raise WorkflowError(
        "invalid config (nothing was run):\n  "
        + "\n  ".join(schema_errors(config, CONFIG_SCHEMA))
    ) from None
try:
    _version_problems = versions.check(config, os.path.join(PARITY_DIR, "rust"))
    if _version_problems:
        raise ConfigError.every(_version_problems)
    PLAN = Plan(config)
    limits.check_plan(PLAN, LIMITS)
    PROBES = ProbePlan.from_config(config, PARITY_DIR, workdir=os.getcwd(), memo=MEMO)
except (ConfigError, ProbeError) as e:
    raise WorkflowError(f"invalid config (nothing was run):\n  {e}") from None
if workflow.is_main_process and not workflow.dryrun:
    # The machine, before any job: a usable temporary folder; HOME for cargo's builds.
    _env_problems = environment.problems(builds=True)
    if _env_problems:
        raise WorkflowError(
            "this machine's environment (nothing was run):\n  "
            + "\n  ".join(_env_problems)
        )


def require_device(device):
    """Refuse, while the DAG is built, a device this host lacks, when jobs would run here:
    not for a dry run and not when an executor sends them elsewhere (Slurm)."""
    if device in PLAN.imported_devices:
        return
    if workflow.is_main_process and workflow.local_exec and not workflow.dryrun:
        problem = host_device_problem(device)
        if problem:
            raise WorkflowError(
                f"device {device} cannot run on this host: {problem}. Leave it out "
                f"(--config devices='[\"cpu\"]'), run it where it exists (e.g. "
                f"--profile profiles/slurm) and import its traces (imported_devices), or "
                f"dry-run with -n."
            )


#: Devices whose runs this host makes; imported devices' traces are only compared.
LOCAL_DEVICES = "|".join(PLAN.local_devices())
#: The probe dtypes (the training ones and half precision); probe batches only.
PROBE_DTYPES = "|".join(probes_module.PROBE_DTYPES)


#: A comparison's file-name tag: its device, then "-" and its name unless it is "main".
TAG_PATTERN = "(cpu|cuda|metal)(-[a-z][a-z0-9_]*)?"

#: The experiments of a user's own model (family own, docs/own-model.md), and the
#: constraints that keep the fixture and PyTorch rules of the built-in families and of own
#: models (rules/own.smk) apart; "(?!)" matches nothing.
OWN_EXPERIMENTS = [
    e for e, x in PLAN.experiments.items() if x["model"]["family"] == "own"
]
OWN_EXPERIMENT = f"(?:{'|'.join(OWN_EXPERIMENTS)})" if OWN_EXPERIMENTS else "(?!)"
BUILTIN_EXPERIMENT = (
    f"(?!{OWN_EXPERIMENT}(?![a-z0-9_]))[a-z][a-z0-9_]*"
    if OWN_EXPERIMENTS
    else "[a-z][a-z0-9_]*"
)


#: The comparison a person reads first: the first of the run (the study's A3 headline,
#: a3_adamw on the CPU, in the default config); None without comparisons.
FIRST_COMPARISON = next(iter(PLAN.comparisons()), None)


def _first_runs():
    """The runs FIRST_COMPARISON reads (reference, candidate and their float64 runs)."""
    first = FIRST_COMPARISON
    return (
        set()
        if first is None
        else {first.reference, first.candidate, *(first.f64_pair or ())}
    )


def first_result_priority(wildcards):
    """A job's ``priority:``: 10 for the jobs FIRST_COMPARISON's tables wait for (its
    fixture, its runs, the comparison itself; the builds: first_build_priority), 0 for every
    other job. Snakemake starts ready jobs of higher priority first, so with one build at a
    time (the ``cargo`` resource, profiles/default) that table appears while the other
    runners still build (docs/performance.md, "The cold workflow")."""
    w = dict(wildcards.items())
    if FIRST_COMPARISON is None or w.get("experiment") != FIRST_COMPARISON.experiment:
        return 0
    if "run" in w:
        key = (w["run"], w["dtype"], w["device"])
        return 10 * any((r.run, r.dtype, r.device) == key for r in _first_runs())
    if "tag" in w:
        return 10 * (w["tag"] == FIRST_COMPARISON.tag)
    return 10


def background_nice(wildcards):
    """A job's resource ``nice`` (parity.core.fileio.job_start): 0 for the jobs
    FIRST_COMPARISON's tables wait for, like their priority (first_result_priority), and
    fileio.BACKGROUND_NICE for every other job of the same rule. Priority only orders the
    starts; on a machine whose cores are busy (a cargo build beside training jobs) it is the
    nice value that lets the build and the first comparison's jobs finish first. A rule
    without the resource runs its jobs at BACKGROUND_NICE; the runner builds are never
    lowered. A resource, not a param: it does not make a job rerun."""
    return 0 if first_result_priority(wildcards) else BACKGROUND_NICE


def first_build_priority(framework):
    """The ``priority:`` of a framework's runner build: 10 for the build a run of
    FIRST_COMPARISON needs (the framework's primary release, that run's device), else 0.
    """

    def priority(wildcards):
        wanted = {
            (versions.primary(config, framework), r.device)
            for r in _first_runs()
            if r.framework == framework
        }
        return 10 * ((wildcards.version, wildcards.device) in wanted)

    return priority


#: Units of the resource ``cargo`` that profiles/default grants: two runner builds at a time.
CARGO_UNITS = 2


def build_cargo_units(framework):
    """A runner build's units of the resource ``cargo``: all CARGO_UNITS for the build
    FIRST_COMPARISON needs (first_build_priority), so it builds alone, with the whole
    machine, and the headline table comes early; one for every other build, so two of them
    build side by side. cargo already uses every core, but burn's build spends minutes
    compiling one crate at a time (burn-ndarray, burn-dispatch), which left a core idle
    while the next build waited (docs/performance.md, "The cold workflow"). Snakemake caps a
    job's units at what ``--resources`` grants, so ``--resources cargo=1`` still runs
    every build, one at a time."""
    first = first_build_priority(framework)

    def units(wildcards):
        return CARGO_UNITS if first(wildcards) else 1

    return units


wildcard_constraints:
    experiment="[a-z][a-z0-9_]*",
    dtype="f32|f64",
    device="cpu|cuda|metal",
    tag=TAG_PATTERN,
    comparison="[a-z][a-z0-9_]*",
    probe="[a-z][a-z0-9_]*",
    host="[a-z][a-z0-9_]*",


def code(script):
    """Param ``code`` of a rule: the hash of its script and the parity modules that script
    runs (parity.core.codeversion), so an edit reruns exactly the jobs whose code changed.
    """
    return code_version(os.path.join(PARITY_DIR, "scripts", script), MEMO)


def known_experiment(experiment):
    """``experiment``, when the config runs it; else a WorkflowError naming it, for a target
    (a file under results/) that names an experiment the config lacks or disables."""
    if experiment in PLAN.experiments:
        return experiment
    if experiment in config["experiments"] and config.get("only") is not None:
        raise WorkflowError(
            f"experiment {experiment!r} is left out by the config's only: "
            f"{config['only']}: add it there to make its files"
        )
    if experiment in config["experiments"]:
        how = " (--configfile bench/scale.yaml)" if experiment == "scale_mlp" else ""
        raise WorkflowError(
            f"experiment {experiment!r} is disabled in the config (enabled: false): enable "
            f"it to make its files{how}"
        )
    raise WorkflowError(
        f"unknown experiment {experiment!r}: a target names it but the config has no such "
        f"experiment (experiments: {', '.join(PLAN.experiments)})"
    )


def all_tables():
    """Every per-comparison table and figure of the plan."""
    return tables_and_figures(PLAN.comparisons())


def tables_and_figures(comparisons):
    """Every table and figure of these comparisons (a localisation's CSV and figure are
    written only when it localised, so they are no declared outputs: its Markdown table
    stands for it; parity.localise.job)."""
    out = []
    for c in comparisons:
        for kind in c.kinds:
            if kind == "localise":
                out.append(c.table(kind, "md"))
            else:
                out += [c.table(kind), c.table(kind, "md"), c.figure(kind)]
    return out


def all_outputs():
    """Targets of the default rule (refusing configured devices this host lacks); with
    remote hosts in the config, the remote target's outputs too (the summary gathers the
    hosts' cells)."""
    for device in PLAN.devices:
        require_device(device)
    return (
        (remote_outputs() if REMOTE_HOSTS else [])
        + all_tables()
        + [k.trace for k in PLAN.runs()]
        + [
            paths.SUMMARY.format(ext="csv"),
            paths.SUMMARY.format(ext="md"),
            paths.SUMMARY_SOURCES,
            paths.FRAMEWORK_SUMMARY.format(ext="csv"),
            paths.VERSIONS_TABLE.format(ext="csv"),
            paths.OPTIMIZER_DEFAULTS.format(ext="csv"),
            paths.PROVENANCE.format(ext="csv"),
            paths.TRAINING_LOOP_PAGE,
            paths.INDEX,
        ]
        + PROBES.outputs()
        + ([paths.PROBES_SOURCES] if PROBES.probes else [])
    )


def workdir_path(path):
    """A file of the workflow's folder as a job's input names it: relative to the working
    directory (``rust/Cargo.toml`` when that is the workflow's folder). Snakemake reruns a job
    whose input set changed, so an absolute path would rerun every job in a copy of the
    project (a moved checkout, CI's clone) although its results/ came along."""
    return os.path.relpath(path)
