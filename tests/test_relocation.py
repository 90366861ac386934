"""A copy of the project together with its results/ and .snakemake/ (a moved checkout, a
colleague's copy, CI's clone elsewhere) is up to date as it stands: Snakemake reruns a job
whose input set or params changed, so no job may name the folder it ran in. Both layouts:
the working directory apart from the Snakefile's checkout (as the tests run it), and the
checkout itself as the working directory (as a user runs it)."""

import json
import shutil

import pytest

from conftest import REPO, load_test_config, run_workflow

pytestmark = pytest.mark.workflow

#: What a checkout holds that a run reads (rust/ without a cargo target folder).
CHECKOUT = (
    "Snakefile",
    "config.yaml",
    ".test",
    "rules",
    "scripts",
    "schemas",
    "probes",
    "rust",
    "report",
    "envs",
    "profiles",
)


def copy_project(src, dst):
    """A copy of a folder with its results/ and .snakemake/ (copytree keeps mtimes)."""
    shutil.copytree(src, dst, symlinks=True)


def absolute_paths_recorded(workdir):
    """Inputs and params of the jobs' metadata records that name an absolute path."""
    found = []
    for record in (workdir / ".snakemake" / "metadata").iterdir():
        meta = json.loads(record.read_text(encoding="utf-8"))
        for field in ("input", "params"):
            for value in meta.get(field) or []:
                if str(value).startswith("/") or "'/" in str(value) or '"/' in str(value):
                    found.append(f"{field} {value}")
    return sorted(set(found))


def assert_nothing_to_be_done(proc):
    assert "Nothing to be done" in proc.stdout, proc.stdout[-8000:]


def test_a_copied_working_directory_is_up_to_date(tmp_path):
    config = load_test_config("tiny")
    first = tmp_path / "work"
    run_workflow(first, config, "--cores", "2")
    assert absolute_paths_recorded(first) == []
    copy = tmp_path / "copy"  # beside it: the path back to the Snakefile's checkout is the same
    copy_project(first, copy)
    assert_nothing_to_be_done(run_workflow(copy, config, "-n", "--cores", "1"))


def test_a_copied_checkout_with_its_results_is_up_to_date(tmp_path):
    first = tmp_path / "checkout"
    first.mkdir()
    for name in CHECKOUT:
        if (REPO / name).is_dir():
            ignore = shutil.ignore_patterns("target", "__pycache__")
            shutil.copytree(REPO / name, first / name, ignore=ignore)
        else:
            shutil.copy2(REPO / name, first / name)
    args = ("--configfile", ".test/tiny.yaml")
    run_workflow(first, None, *args, "--cores", "2", snakefile=first / "Snakefile")
    assert absolute_paths_recorded(first) == []
    moved = tmp_path / "elsewhere" / "moved"
    copy_project(first, moved)
    proc = run_workflow(moved, None, *args, "-n", "--cores", "1", snakefile=moved / "Snakefile")
    assert_nothing_to_be_done(proc)
