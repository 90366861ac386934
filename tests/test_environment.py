"""The machine's environment checked before anything runs, each problem in one line that
says what to do (issue 36, kind 8): the temporary folder, HOME, PARITY_VENV."""

from __future__ import annotations

import os
import shutil
import subprocess

from parity.core import environment

from conftest import REPO, run_workflow


def test_a_usable_temporary_folder_and_home_pass(tmp_path):
    env = {"TMPDIR": str(tmp_path), "HOME": str(tmp_path)}
    assert environment.problems(builds=True, env=env) == []


def test_a_missing_or_unwritable_temporary_folder_is_named(tmp_path):
    missing = environment.tmp_problem({"TMPDIR": str(tmp_path / "nope")})
    assert (
        missing
        == f"TMPDIR={tmp_path / 'nope'} is not a folder: set TMPDIR to a writable folder with room"
    )
    a_file = tmp_path / "f"
    a_file.write_text("")
    assert "is not a folder" in environment.tmp_problem({"TMPDIR": str(a_file)})


def test_a_full_temporary_folder_is_named(tmp_path, monkeypatch):
    real = shutil.disk_usage
    monkeypatch.setattr(environment.shutil, "disk_usage", lambda p: real(p)._replace(free=1 << 20))
    problem = environment.tmp_problem({"TMPDIR": str(tmp_path)})
    assert problem == (
        f"TMPDIR={tmp_path} has 1 MiB free, less than 64 MiB: free some space there or set "
        "TMPDIR to a folder with room"
    )


def test_a_missing_home_is_named_only_when_something_builds(tmp_path):
    env = {"TMPDIR": str(tmp_path)}
    assert environment.problems(builds=False, env=env) == []
    (problem,) = environment.problems(builds=True, env=env)
    assert problem.startswith("HOME is not set: cargo and rustup find the Rust toolchain")


def test_the_workflow_refuses_a_missing_temporary_folder_before_any_job(tmp_path):
    env = dict(os.environ, TMPDIR=str(tmp_path / "gone"))
    proc = run_workflow(tmp_path / "w", None, "--cores", "1", env=env, check=False)
    assert proc.returncode != 0
    assert "this machine's environment (nothing was run):" in proc.stdout
    assert f"TMPDIR={tmp_path / 'gone'} is not a folder" in proc.stdout
    assert not (tmp_path / "w" / "results").exists()


def _bootstrap(tmp_path, env):
    repo = tmp_path / "repo"
    subprocess.run(["git", "clone", "-q", str(REPO), str(repo)], check=True)
    shutil.copy(REPO / "scripts" / "dev" / "bootstrap", repo / "scripts" / "dev" / "bootstrap")
    proc = subprocess.run(
        ["scripts/dev/bootstrap"], cwd=repo, env=env, capture_output=True, text=True
    )
    return repo, proc


def test_bootstrap_refuses_a_venv_path_that_is_a_file_and_changes_nothing(tmp_path):
    a_file = tmp_path / "venv-file"
    a_file.write_text("")
    repo, proc = _bootstrap(tmp_path, dict(os.environ, PARITY_VENV=str(a_file)))
    assert proc.returncode == 1
    assert f"PARITY_VENV={a_file} is a file, not a folder" in proc.stderr
    assert not os.path.lexists(repo / ".venv")


def test_bootstrap_names_a_missing_home(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "HOME"}
    _, proc = _bootstrap(tmp_path, env)
    assert proc.returncode == 1
    assert "bootstrap: HOME is not set to a folder" in proc.stderr
