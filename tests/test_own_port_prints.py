"""A port that prints (docs/own-model.md, "Errors you may meet"): the first thing a porter
writes is a `println!`. The runner keeps its protocol on a channel of its own (standard
output as it started, set apart before the port runs: parity_common::frames::
protocol_output), so a port printing in `build` and in every `forward`, with and without a
newline, runs through the whole workflow (own_check's inspect, training, the localisation's
replay) as if it printed nothing, and its lines land in the jobs' logs.

One real build of the template's port (a few minutes on 2 cores with candle compiled)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from conftest import REPO, SNAKEMAKE, use_our_parity_common

pytestmark = pytest.mark.workflow

PRINTS = {
    "fn build(config: &serde_json::Value, vb: VarBuilder) -> Result<Self> {": (
        '    println!("port says: building from {config}");\n'
        '        print!("port says: no newline ");'
    ),
    "fn forward(&self, x: &Tensor, taps: &mut Taps) -> Result<Tensor> {": (
        '    println!("port says: forward on {:?}", x.dims());'
    ),
}


@pytest.fixture(scope="module")
def printing_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("user") / "mine"
    shutil.copytree(REPO / "examples" / "template", folder, ignore=shutil.ignore_patterns("target"))
    use_our_parity_common(folder / "candle-port" / "Cargo.toml")
    lib = folder / "candle-port" / "src" / "lib.rs"
    text = lib.read_text()
    for line, prints in PRINTS.items():
        assert line in text, line
        text = text.replace(line, f"{line}\n    {prints}")
    lib.write_text(text)
    cfg = yaml.safe_load((folder / "config.yaml").read_text())
    cfg["experiments"]["mine"]["steps"] = 3
    cfg["localise"] = {"all": True}  # the replay runs the port too
    (folder / "config.yaml").write_text(yaml.safe_dump(cfg))
    env = dict(os.environ)
    env.setdefault("CARGO_TARGET_DIR", str(REPO / "rust" / "target"))
    snakefile = str(REPO / "Snakefile")
    proc = subprocess.run(
        [SNAKEMAKE, "--cores", "2", "--snakefile", snakefile, "--configfile", "config.yaml"],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=3600,
    )
    return folder, proc


def test_a_port_that_prints_runs_and_passes(printing_run):
    folder, proc = printing_run
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    assert "implausible" not in out and "wrote no JSON" not in out
    summary = (folder / "results" / "tables" / "summary.csv").read_text()
    assert "mine,main," in summary and ",pass," in summary, summary


def test_its_prints_go_to_the_jobs_logs(printing_run):
    folder, _ = printing_run
    logs = folder / "results" / "logs"
    check = (logs / "own_check" / "mine-candle-cpu.log").read_text()
    assert 'port says: building from {"hidden":8,"inputs":4,"outputs":2}' in check
    assert "port says: forward on [8, 4]" in check
    trains = list((logs / "train" / "mine").glob("candle-*.log"))
    assert trains and all("port says: forward on [8, 4]" in p.read_text() for p in trains)
    # a print without a newline reaches the log too (flushed when the runner ends)
    assert all("port says: no newline " in p.read_text() for p in trains)
    replays = [p.read_text() for p in Path(logs / "localise" / "mine").glob("*.log")]
    assert any("port says: forward on" in text for text in replays), replays
