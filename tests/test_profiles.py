"""The profiles: what each one sets once Snakemake has merged them, and how a CUDA job's
`gpu` resource reaches sbatch. No cluster needed (tests/test_slurm.py runs a real one)."""

import copy
import re
from types import SimpleNamespace

import pytest
from snakemake.cli import parse_args
from snakemake_executor_plugin_slurm.utils import set_gres_string

from conftest import REPO, load_config, run_workflow

SNAKEFILE = str(REPO / "Snakefile")
SLURM = str(REPO / "profiles" / "slurm")


def effective(*argv):
    """The arguments Snakemake runs with: command line, --profile and profiles/default."""
    _, args = parse_args(["--snakefile", SNAKEFILE, *argv])
    return args


def workflow_rules():
    text = "\n".join(p.read_text() for p in [REPO / "Snakefile", *REPO.glob("rules/*.smk")])
    # `rule name:` and `use rule base as name with:` both define a rule
    return {a or b for a, b in re.findall(r"^(?:rule (\w+):|use rule \w+ as (\w+))", text, re.M)}


def test_default_profile_applies_to_a_plain_run():
    args = effective()
    assert args.executor is None and args.cores >= 1
    assert args.keep_going is False
    assert args.printshellcmds and args.rerun_incomplete and args.show_failed_logs


def test_command_line_overrides_the_default_profile():
    assert effective("--cores", "1", "--keep-going").cores == 1
    assert effective("--keep-going").keep_going is True


def test_slurm_profile_keeps_the_defaults_and_adds_cluster_settings():
    args = effective("--profile", SLURM)
    assert args.executor == "slurm" and args.jobs >= 1
    # profiles/default is applied on top and must not undo the cluster's settings.
    assert args.latency_wait == 60
    assert args.printshellcmds and args.rerun_incomplete and args.keep_going is False
    assert {"mem_mb", "runtime"} <= set(args.default_resources)
    assert set(args.set_resources) <= workflow_rules()
    assert args.set_resources["train_torch"]["mem_mb"].value >= 2000


def test_slurm_profile_is_for_a_cluster_with_accounting():
    """The flags a Slurm without accounting needs are passed where needed (the test
    cluster's, tests/test_slurm.py), not set for every cluster."""
    args = effective("--profile", SLURM)
    assert not isinstance(args.slurm_status_command, str)  # plugin default: sacct
    assert args.slurm_no_account is not True
    flags = effective("--profile", SLURM, "--slurm-status-command", "squeue")
    assert flags.slurm_status_command == "squeue" and flags.latency_wait == 60


def _pairs(text):
    return dict(kv.split("=", 1) for kv in text.split(", ")) if text else {}


def job_blocks(stdout):
    """(rule, wildcards, resources) of every job in a dry run's output."""
    out = []
    for block in re.split(r"\n(?=(?:local)?rule \w+:)", stdout):
        m = re.match(r"(?:local)?rule (\w+):", block)
        if not m:
            continue
        fields = dict(re.findall(r"^\s+(wildcards|resources): (.*)$", block, flags=re.M))
        out.append((m.group(1), _pairs(fields.get("wildcards")), _pairs(fields.get("resources"))))
    return out


def test_cuda_train_jobs_request_one_gpu_under_the_slurm_profile(tmp_path):
    config = copy.deepcopy(load_config())
    config["devices"] = ["cpu", "cuda"]
    proc = run_workflow(tmp_path, config, "--profile", SLURM, "-n")
    train = [b for b in job_blocks(proc.stdout) if b[0].startswith("train_")]
    assert {wc["device"] for _, wc, _ in train} == {"cpu", "cuda"}
    for rule, wc, res in train:
        assert res["gpu"] == ("1" if wc["device"] == "cuda" else "0"), (rule, wc)
        assert int(res["mem_mb"]) >= 2000 and int(res["runtime"]) == 30


class FakeJob:
    """What the plugin reads from a job: resources by .get and by attribute."""

    def __init__(self, **resources):
        self.resources = SimpleNamespace(**resources)
        self.resources.get = lambda k, default=None: resources.get(k, default)


@pytest.mark.parametrize(("gpu", "sbatch"), [(1, " --gpus=1"), (0, "")])
def test_slurm_plugin_turns_the_gpu_resource_into_sbatch_gpus(gpu, sbatch):
    """snakemake-executor-plugin-slurm 2.8.0 maps the standard `gpu` resource itself."""
    assert set_gres_string(FakeJob(gpu=gpu)) == sbatch
