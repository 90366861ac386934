"""scripts/dev/bootstrap compiles the CPU candle runner's dependencies while pip installs the
requirements (docs/performance.md: the README's first command from nothing), into the very
target folder and with the very cargo command the workflow's first build uses, so that build
finds them fresh. Run with a fake ``cargo`` and a fake Python (its venv's pip records what it
was asked), so nothing is installed or compiled; the target folder the workflow uses is read
from the DAG Snakemake builds, not copied."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import textwrap

from parity.train.build import target_folders

from conftest import REPO

FAKE_CARGO = """#!/bin/sh
if [ "$1" = "--version" ]; then echo "cargo 1.95.0 (fake)"; exit 0; fi
echo "$@" >> "$FAKE_LOG.cargo"
exit "${FAKE_CARGO_STATUS:-0}"
"""

#: The fake interpreter bootstrap is given (PYTHON): reads the version check from standard
#: input, and `-m venv DIR` makes DIR/bin/python, a copy of itself, whose pip records its
#: arguments and exits with FAKE_PIP_STATUS.
FAKE_PYTHON = """#!/bin/sh
case "$1" in
  -) cat >/dev/null; exit 0 ;;
  --version) echo "Python 3.11 (fake)"; exit 0 ;;
  -m)
    if [ "$2" = venv ]; then mkdir -p "$3/bin"; cp "$0" "$3/bin/python"; exit 0; fi
    echo "$@" >> "$FAKE_LOG.pip"
    exit "${FAKE_PIP_STATUS:-0}" ;;
esac
exit 0
"""

#: Prints the params.build of every build_candle job of the default config's DAG.
BUILD_PARAMS = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    from snakemake.api import SnakemakeApi
    from snakemake.settings.types import OutputSettings, ResourceSettings

    with SnakemakeApi(OutputSettings(quiet={"all"})) as api:
        wf = api.workflow(
            resource_settings=ResourceSettings(cores=2),
            snakefile=Path(sys.argv[1]) / "Snakefile",
            workdir=Path(sys.argv[2]),
        )
        workflow = wf.dag().workflow_api._workflow
        workflow._prepare_dag(forceall=False, ignore_incomplete=False, lock_warn_only=True)
        workflow._build_dag()
        builds = [
            {**dict(j.wildcards_dict), **j.params.build}
            for j in workflow.dag.needrun_jobs()
            if j.rule.name == "build_candle"
        ]
        print(json.dumps(builds))
    """
)


def _executable(path, text):
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def _setup(tmp_path):
    """A repository holding bootstrap and the requirements, and the fakes in tmp/bin."""
    repo = tmp_path / "repo"
    (repo / "scripts" / "dev").mkdir(parents=True)
    shutil.copy(REPO / "scripts" / "dev" / "bootstrap", repo / "scripts" / "dev" / "bootstrap")
    for name in ("requirements.txt", "requirements.lock"):
        shutil.copy(REPO / name, repo / name)
    fakes = tmp_path / "bin"
    fakes.mkdir()
    _executable(fakes / "cargo", FAKE_CARGO)
    _executable(fakes / "python", FAKE_PYTHON)


def _bootstrap(tmp_path, **env):
    """(bootstrap's process, {"cargo": calls, "pip": calls}) of one run in the repository
    _setup made; the calls of earlier runs are forgotten."""
    log = tmp_path / "calls"
    for kind in ("cargo", "pip"):
        log.with_name(f"calls.{kind}").unlink(missing_ok=True)
    full = dict(
        os.environ,
        PATH=f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}",
        PYTHON=str(tmp_path / "bin" / "python"),
        FAKE_LOG=str(log),
        PARITY_VENV=str(tmp_path / "venv"),
        CARGO_TARGET_DIR=str(tmp_path / "cargo-target"),
        **env,
    )
    proc = subprocess.run(
        ["scripts/dev/bootstrap"], cwd=tmp_path / "repo", env=full, capture_output=True, text=True
    )
    calls = {}
    for kind in ("cargo", "pip"):
        path = log.with_name(f"calls.{kind}")
        calls[kind] = path.read_text().splitlines() if path.exists() else []
    return proc, calls


def _workflow_cpu_build(tmp_path):
    out = subprocess.run(
        [sys.executable, "-c", BUILD_PARAMS, str(REPO), str(tmp_path / "dag")],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
    )
    builds = json.loads(out.stdout.strip().splitlines()[-1])
    return next(b for b in builds if b["device"] == "cpu" and not b["staged"])


def test_the_candle_dependencies_compile_where_the_workflows_first_build_looks(
    tmp_path, monkeypatch
):
    _setup(tmp_path)
    proc, calls = _bootstrap(tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert len(calls["pip"]) == 2, calls  # pip upgraded, then the requirements
    (cargo,) = calls["cargo"]
    build = _workflow_cpu_build(tmp_path)
    monkeypatch.setenv("CARGO_TARGET_DIR", str(tmp_path / "cargo-target"))  # as bootstrap's
    _, folder = target_folders(REPO / "rust", build["target"])
    want = ["build", "--release", "--locked", "-p", "candle-parity", *build["features"]]
    want += ["--manifest-path", "rust/Cargo.toml", "--target-dir", folder]
    assert cargo.split() == want


def test_a_failed_prebuild_is_reported_and_loses_nothing(tmp_path):
    _setup(tmp_path)
    proc, calls = _bootstrap(tmp_path, FAKE_CARGO_STATUS="101")
    assert len(calls["cargo"]) == 1
    assert proc.returncode == 0, proc.stderr
    assert "compiling ahead failed" in proc.stderr
    assert (tmp_path / "venv" / ".parity-requirements").is_file()


def test_a_failed_pip_install_fails_bootstrap_after_the_prebuild(tmp_path):
    _setup(tmp_path)
    proc, calls = _bootstrap(tmp_path, FAKE_PIP_STATUS="1")
    assert proc.returncode == 1
    assert "pip install failed" in proc.stderr
    assert calls["cargo"], "the prebuild was started and waited for"
    assert not (tmp_path / "venv" / ".parity-requirements").exists()


def test_a_set_up_venv_starts_no_prebuild(tmp_path):
    _setup(tmp_path)
    first, _ = _bootstrap(tmp_path)
    assert first.returncode == 0, first.stderr
    again, calls = _bootstrap(tmp_path)
    assert again.returncode == 0, again.stderr
    assert calls == {"cargo": [], "pip": []}
