"""Code-change reruns: an edit reruns exactly the jobs whose code it changes.

Each rule's ``code`` param hashes its script and the parity modules that script imports
(``parity.core.codeversion``). Checked here on a real run of a copy of this checkout: after an
edit to the comparison maths a dry run schedules the comparison jobs and no training job;
after an edit to the trace schema it schedules every training job, burn's included.
"""

import copy
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from parity.core.codeversion import closure, code_version
from parity.plan import versions

from conftest import REPO, load_test_config, record_binary, run_workflow

SCRIPTS = REPO / "scripts"


def parity_files(script: str) -> set[str]:
    return {p.relative_to(SCRIPTS).as_posix() for p in closure(str(SCRIPTS / script))}


def test_training_code_does_not_include_the_comparison_maths():
    for script in ("train_torch.py", "train_rust.py"):
        files = parity_files(script)
        assert "parity/trace/schema.py" in files  # the trace writer shapes a trace
        assert "parity/compare/maths.py" not in files
        assert "parity/compare/closeness.py" not in files
        assert "parity/plan/plan.py" not in files  # a job gets its settings, not the plan
    files = parity_files("compare.py")
    assert {
        "parity/compare/maths.py",
        "parity/compare/closeness.py",
        "parity/trace/schema.py",
    } <= files
    assert "parity/train/torch.py" not in files


def test_imports_are_followed_through_packages_and_function_bodies(tmp_path):
    # run/rust imports runspec, which imports models; frameworks/__init__ its modules.
    files = parity_files("train_rust.py")
    assert {
        "parity/plan/runspec.py",
        "parity/core/models.py",
        "parity/plan/frameworks/candle.py",
    } <= files
    # compare.diagnosis.float64_tables imports activations inside the function.
    assert "parity/compare/activations.py" in parity_files("compare.py")


def test_the_hash_changes_with_any_file_it_covers(tmp_path):
    tree = tmp_path / "scripts"
    shutil.copytree(SCRIPTS, tree, ignore=shutil.ignore_patterns("__pycache__"))
    cmd = [
        sys.executable,
        "-c",
        (
            "import sys; from parity.core.codeversion import code_version; "
            "print(code_version(sys.argv[1]))"
        ),
    ]

    def version(script):
        out = subprocess.run(
            [*cmd, str(tree / script)], cwd=tree, capture_output=True, text=True, check=True
        )
        return out.stdout.strip()

    before = {s: version(s) for s in ("train_torch.py", "compare.py")}
    assert before["train_torch.py"] == code_version(str(SCRIPTS / "train_torch.py"))
    with open(tree / "parity" / "compare" / "maths.py", "a") as f:
        f.write("\n# edited\n")
    assert version("compare.py") != before["compare.py"]
    assert version("train_torch.py") == before["train_torch.py"]


# ----- on a real run ------------------------------------------------------------------


def copy_checkout(dest: Path) -> None:
    """The files of this checkout (tracked, and untracked ones git does not ignore), with
    their modification times."""
    out = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=REPO,
        capture_output=True,
        check=True,
    )
    for name in out.stdout.decode().split("\0"):
        if name and (REPO / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, dest / name)


def scheduled(proc) -> dict[str, int]:
    """The job counts of a dry run's "Job stats" table, by rule."""
    if "Nothing to be done" in proc.stdout:
        return {}
    stats = proc.stdout.split("Job stats:", 1)[1].split("total", 1)[0]
    return {m[1]: int(m[2]) for m in re.finditer(r"^(\w+)\s+(\d+)$", stats, re.MULTILINE)}


@pytest.fixture(scope="module")
def finished(tmp_path_factory, candle_binary, burn_binary):
    """A copy of this checkout and a finished run of ``.test/tiny.yaml`` (A3 SGD: torch,
    candle, burn) in its own working folder, the runners' binaries put in place as the build
    rules would (a copied checkout would otherwise recompile its Rust crates)."""
    root = tmp_path_factory.mktemp("rerun")
    repo, workdir = root / "repo", root / "work"
    copy_checkout(repo)
    config = load_test_config("tiny")
    for framework, binary in (("candle", candle_binary), ("burn", burn_binary)):
        target = workdir / versions.runner_binary(framework, versions.pinned(framework), "cpu")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(binary, target)
        record_binary(target)
    args = ("--cores", "2")
    run_workflow(workdir, config, *args, snakefile=repo / "Snakefile")
    nothing = run_workflow(workdir, config, "-n", *args, snakefile=repo / "Snakefile")
    assert scheduled(nothing) == {}, nothing.stdout[-3000:]
    return repo, workdir, config


def dry_run_after_edit(finished, module: str) -> dict[str, int]:
    repo, workdir, config = finished
    path = repo / "scripts" / "parity" / module
    original = path.read_bytes()
    try:
        with open(path, "a") as f:
            f.write("\n# an edit\n")
        proc = run_workflow(workdir, config, "-n", "--cores", "2", snakefile=repo / "Snakefile")
    finally:
        path.write_bytes(original)
    return scheduled(proc)


@pytest.mark.workflow
def test_an_edit_to_the_comparison_maths_reruns_no_training_job(finished):
    jobs = dry_run_after_edit(finished, "compare/maths.py")
    assert not any(rule.startswith(("train_", "probe_", "build_")) for rule in jobs), jobs
    # a3_sgd has three comparisons (main, burn, burn_candle), each with three tables (the
    # per-step, the split and the diagnosis) made by one compare job.
    assert jobs["compare"] == 3 and "perstep" not in jobs, jobs


@pytest.mark.workflow
def test_an_edit_to_the_trace_schema_reruns_every_training_job_burns_included(finished):
    jobs = dry_run_after_edit(finished, "trace/schema.py")
    # torch, candle and burn, each in f32 and f64
    for rule in ("train_torch", "train_candle", "train_burn"):
        assert jobs.get(rule) == 2, jobs
    assert not any(rule.startswith("build_") for rule in jobs), jobs


@pytest.mark.workflow
def test_a_changed_comparison_setting_reruns_its_comparisons_and_no_training_job(finished):
    """A setting only the comparison jobs receive (their resolved params) reruns those jobs:
    the three comparisons and their localisations, nothing that trains, probes or builds."""
    repo, workdir, config = finished
    changed = copy.deepcopy(config)
    changed.setdefault("diagnosis", {})["f64_rounding_factor"] = 999
    proc = run_workflow(workdir, changed, "-n", "--cores", "2", snakefile=repo / "Snakefile")
    jobs = scheduled(proc)
    assert not any(rule.startswith(("train_", "probe_", "build_")) for rule in jobs), jobs
    assert jobs["compare"] == 3 and jobs["localise"] == 3, jobs
    assert "params have changed" in proc.stdout.lower(), proc.stdout[-3000:]


@pytest.mark.workflow
def test_the_edit_undone_leaves_nothing_to_do(finished):
    repo, workdir, config = finished
    proc = run_workflow(workdir, config, "-n", "--cores", "2", snakefile=repo / "Snakefile")
    assert scheduled(proc) == {}, proc.stdout[-3000:]
