"""A user's own model through the real workflow, as docs/own-model.md tells a newcomer to run
it: the template (examples/template: a PyTorch factory, its candle port) copied to a folder
outside the repository, its crate pointed at this checkout's parity-common, three steps,
run from that folder with this checkout's Snakefile; then the same folder as a Snakemake
module of the user's own workflow; then the bad inputs the page lists, each named."""

from __future__ import annotations

import csv
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from conftest import REPO, SNAKEMAKE, use_our_parity_common

pytestmark = pytest.mark.workflow


def snakemake(folder: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.setdefault("CARGO_TARGET_DIR", str(REPO / "rust" / "target"))
    proc = subprocess.run(
        [SNAKEMAKE, "--cores", "2", *args],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=3600,
    )
    if check and proc.returncode != 0:
        pytest.fail(f"snakemake failed ({proc.returncode}):\n{(proc.stdout + proc.stderr)[-6000:]}")
    return proc


def copy_template(dest: Path, steps: int = 3) -> Path:
    """The template as a user copies it: outside the repository, its Cargo.toml's
    parity-common path set to this checkout's, a short run."""
    shutil.copytree(REPO / "examples" / "template", dest, ignore=shutil.ignore_patterns("target"))
    use_our_parity_common(dest / "candle-port" / "Cargo.toml")
    cfg = yaml.safe_load((dest / "config.yaml").read_text())
    cfg["experiments"]["mine"]["steps"] = steps
    (dest / "config.yaml").write_text(yaml.safe_dump(cfg))
    return dest


def summary(folder: Path) -> dict:
    with open(folder / "results" / "tables" / "summary.csv", encoding="utf-8") as f:
        return {(r["experiment"], r["comparison"]): r for r in csv.DictReader(f)}


@pytest.fixture(scope="module")
def template_run(tmp_path_factory):
    folder = copy_template(tmp_path_factory.mktemp("user") / "mine")
    proc = snakemake(folder, "--snakefile", str(REPO / "Snakefile"), "--configfile", "config.yaml")
    return folder, proc


def test_the_template_runs_from_a_folder_outside_the_repository(template_run):
    folder, _ = template_run
    row = summary(folder)[("mine", "main")]
    assert row["verdict"] == "pass", row
    for name in ("perstep-cpu.csv", "split-cpu.csv", "diagnosis-cpu.csv"):
        assert (folder / "results" / "tables" / "mine" / name).is_file()
    assert (folder / "results" / "bin" / "own" / "mine-candle-cpu").is_file()
    check = folder / "results" / "own" / "mine" / "check-candle-cpu.json"
    assert check.is_file()


def test_an_edit_to_the_port_rebuilds_and_reruns_only_what_depends_on_it(template_run):
    folder, _ = template_run
    lib = folder / "candle-port" / "src" / "lib.rs"
    original = lib.read_text()
    try:
        lib.write_text(original + "\n// an edit\n")
        proc = snakemake(
            folder, "--snakefile", str(REPO / "Snakefile"), "--configfile", "config.yaml", "-n"
        )
    finally:
        lib.write_text(original)
    jobs = dict(re.findall(r"^(\w+)\s+(\d+)$", proc.stdout.split("Job stats:")[1], re.M))
    assert jobs.get("build_own") == "1" and jobs.get("train_candle") == "2", jobs
    assert not any(k.startswith(("train_own_torch", "own_fixture", "build_candle")) for k in jobs)


def test_the_workflow_runs_as_a_module_of_the_users_own(tmp_path):
    folder = copy_template(tmp_path / "mine")
    (folder / "Snakefile").write_text(
        'configfile: "config.yaml"\n\n\n'
        f'module parity:\n    snakefile: "{REPO / "Snakefile"}"\n    config: config\n\n\n'
        "use rule * from parity as parity_*\n"
    )
    snakemake(folder)
    assert summary(folder)[("mine", "main")]["verdict"] == "pass"


def test_a_port_with_another_parameter_name_is_refused_before_any_training_job(tmp_path):
    folder = copy_template(tmp_path / "mine")
    lib = folder / "candle-port" / "src" / "lib.rs"
    lib.write_text(lib.read_text().replace('"0"', '"first"', 1))
    proc = snakemake(
        folder,
        "--snakefile",
        str(REPO / "Snakefile"),
        "--configfile",
        "config.yaml",
        check=False,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "the candle port does not match the PyTorch model" in out
    assert not list((folder / "results" / "traces").glob("mine/candle-*.parquet"))


def test_a_port_that_does_not_compile_names_cargos_error_and_its_log(tmp_path):
    folder = copy_template(tmp_path / "mine")
    lib = folder / "candle-port" / "src" / "lib.rs"
    lib.write_text(lib.read_text() + '\nfn broken() -> u32 { "no" }\n')
    proc = snakemake(
        folder,
        "--snakefile",
        str(REPO / "Snakefile"),
        "--configfile",
        "config.yaml",
        check=False,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "does not build" in out and "mismatched types" in out
    assert "results/logs/build/own-mine-candle-cpu.log" in out
