"""Adding a model family as docs/development.md ("Adding a model family") says, and nothing
more: in a temporary copy of this checkout, a tiny family (Linear → tanh → Linear) gets its
PyTorch module, a candle port and a burn port in the runner crates' registries, and an
experiment in the config; the real workflow then trains it in PyTorch, candle and burn, and
both Rust ports agree with PyTorch. The files the test touches are the ones the page names,
read from the page itself, so the page and the way a family is added cannot drift apart."""

from __future__ import annotations

import csv
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from conftest import REPO, SNAKEMAKE

pytestmark = pytest.mark.workflow

FAMILY = "tanh_mlp"

TORCH = '''"""Linear → tanh → Linear (state_dict keys 0.weight, 0.bias, 2.weight, 2.bias)."""

from torch import nn


def make(inputs, hidden, outputs):
    return nn.Sequential(nn.Linear(inputs, hidden), nn.Tanh(), nn.Linear(hidden, outputs))
'''

CANDLE = """//! The `tanh_mlp` family: Linear → tanh → Linear.

use anyhow::Result;
use candle_core::Tensor;
use candle_nn::{Linear, Module, VarBuilder};
use parity_common::candle::{CandleModel, Taps};
use serde::Deserialize;

#[derive(Deserialize)]
struct Config {
    inputs: usize,
    hidden: usize,
    outputs: usize,
}

/// `0` and `2`, as nn.Sequential names them.
pub struct TanhMlp(Linear, Linear);

impl CandleModel for TanhMlp {
    fn build(config: &serde_json::Value, vb: VarBuilder) -> Result<Self> {
        let c: Config = parity_common::families::parse("tanh_mlp", config)?;
        Ok(TanhMlp(
            candle_nn::linear(c.inputs, c.hidden, vb.pp("0"))?,
            candle_nn::linear(c.hidden, c.outputs, vb.pp("2"))?,
        ))
    }

    fn forward(&self, x: &Tensor, taps: &mut Taps) -> Result<Tensor> {
        let h = taps.tap("0", &self.0.forward(x)?)?;
        let h = taps.tap("1", &h.tanh()?)?;
        Ok(taps.tap("2", &self.1.forward(&h)?)?)
    }
}
"""

BURN = """//! The `tanh_mlp` family: Linear → tanh → Linear.

use anyhow::{bail, Result};
use burn::module::Module;
use burn::nn::{Linear, LinearConfig};
use burn::tensor::activation::tanh;
use burn::tensor::Device;
use parity_common::burn::{BurnModel, Input, Output, Taps};
use serde::Deserialize;

#[derive(Deserialize)]
struct Config {
    inputs: usize,
    hidden: usize,
    outputs: usize,
}

/// PyTorch's `0` and `2` (key_remap).
#[derive(Module, Debug)]
pub struct TanhMlp {
    first: Linear,
    second: Linear,
}

impl BurnModel for TanhMlp {
    fn init(config: &serde_json::Value, device: &Device) -> Result<Self> {
        let c: Config = parity_common::families::parse("tanh_mlp", config)?;
        Ok(TanhMlp {
            first: LinearConfig::new(c.inputs, c.hidden).init(device),
            second: LinearConfig::new(c.hidden, c.outputs).init(device),
        })
    }

    fn forward(&self, x: Input, taps: &mut Taps) -> Result<Output> {
        let Input::Float2(x) = x else { bail!("floats [batch, inputs]") };
        let h = taps.tap("0", self.first.forward(x));
        let h = taps.tap("1", tanh(h));
        Ok(Output::Rank2(taps.tap("2", self.second.forward(h))))
    }

    fn key_remap(_config: &serde_json::Value) -> Vec<(String, String)> {
        vec![(r"^0\\.".into(), "first.".into()), (r"^2\\.".into(), "second.".into())]
    }
}
"""

EXPERIMENT = {
    "model": {
        "family": "own",
        "torch": {
            "factory": f"models/{FAMILY}.py:make",
            "kwargs": {"inputs": 4, "hidden": 8, "outputs": 2},
        },
        "candle": {"family": FAMILY},
        "burn": {"family": FAMILY},
    },
    "loss": "mse",
    "data": {
        "seed": 7,
        "batches": 2,
        "batch_size": 8,
        "inputs": {"shape": [4]},
        "targets": {"shape": [2]},
    },
    "optimizer": {"name": "sgd", "lr": 0.1},
    "steps": 5,
    "runs": {"torch": {}, "candle": {}, "burn": {}},
    "comparisons": {
        "main": {"reference": "torch", "candidate": "candle"},
        "burn": {"reference": "torch", "candidate": "burn"},
    },
}


def named_files() -> set[str]:
    """The files docs/development.md's "Adding a model family" names, for :data:`FAMILY`."""
    page = (REPO / "docs" / "development.md").read_text(encoding="utf-8")
    section = page.split("## Adding a model family", 1)[1].split("\n## ", 1)[0]
    paths = re.findall(r"`((?:models|rust)/[^`\s]+|config\.yaml)`", section)
    return {p.replace("<family>", FAMILY) for p in paths}


def register(registry: Path, port_type: str) -> None:
    """Adds the family's module and its line in the ``port_registry!`` list of
    ``registry``."""
    text = registry.read_text(encoding="utf-8")
    text = text.replace("pub mod cnn;", f"pub mod cnn;\npub mod {FAMILY};", 1)
    text = re.sub(
        r"(    families: \{\n)", rf'\1        "{FAMILY}" => {FAMILY}::{port_type},\n', text, count=1
    )
    registry.write_text(text, encoding="utf-8")


def differs(copied: Path, original: Path) -> bool:
    """Whether ``copied`` is new or other than ``original``."""
    return not original.is_file() or original.read_bytes() != copied.read_bytes()


@pytest.fixture(scope="module")
def copy(tmp_path_factory) -> Path:
    """A copy of the checkout's tracked files with the family added."""
    dest = tmp_path_factory.mktemp("family") / "repo"
    files = subprocess.run(
        ["git", "ls-files", "-z"], cwd=REPO, check=True, capture_output=True
    ).stdout.split(b"\0")
    for name in filter(None, files):
        src = REPO / os.fsdecode(name)
        if src.is_file():
            (dest / src.relative_to(REPO)).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / src.relative_to(REPO))
    os.symlink(REPO / ".venv", dest / ".venv")
    touched = {
        f"models/{FAMILY}.py": TORCH,
        f"rust/candle-parity/src/families/{FAMILY}.rs": CANDLE,
        f"rust/burn-parity/src/families/{FAMILY}.rs": BURN,
    }
    for rel, text in touched.items():
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        (dest / rel).write_text(text, encoding="utf-8")
    register(dest / "rust/candle-parity/src/families/mod.rs", "TanhMlp")
    register(dest / "rust/burn-parity/src/families/mod.rs", "TanhMlp")
    cfg = dest / "config.yaml"
    text = cfg.read_text(encoding="utf-8")
    entry = yaml.safe_dump({"experiments": {FAMILY: EXPERIMENT}}).split("\n", 1)[1]
    cfg.write_text(text.replace("experiments:\n", "experiments:\n" + entry, 1), encoding="utf-8")
    got = {
        str(p.relative_to(dest))
        for p in dest.rglob("*")
        if p.is_file() and ".venv" not in p.parts and differs(p, REPO / p.relative_to(dest))
    }
    assert got == named_files(), f"touched {sorted(got)}; the page names {sorted(named_files())}"
    return dest


def test_the_page_names_the_files_a_family_needs():
    assert named_files() == {
        f"models/{FAMILY}.py",
        f"rust/candle-parity/src/families/{FAMILY}.rs",
        "rust/candle-parity/src/families/mod.rs",
        f"rust/burn-parity/src/families/{FAMILY}.rs",
        "rust/burn-parity/src/families/mod.rs",
        "config.yaml",
    }


def test_a_new_family_trains_in_all_three_frameworks(copy):
    only = copy / "only.yaml"
    only.write_text(yaml.safe_dump({"only": [FAMILY], "probes": {"enabled": False}}))
    env = dict(os.environ)
    env.setdefault("CARGO_TARGET_DIR", str(REPO / "rust" / "target"))
    proc = subprocess.run(
        [SNAKEMAKE, "summary", "--cores", "2", "--configfile", str(only)],
        cwd=copy,
        env=env,
        capture_output=True,
        text=True,
        timeout=3600,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    with open(copy / "results/tables/summary.csv", encoding="utf-8") as f:
        rows = {r["comparison"]: r for r in csv.DictReader(f) if r["experiment"] == FAMILY}
    assert {c: r["verdict"] for c, r in rows.items()} == {"main": "pass", "burn": "pass"}
    for kind in ("candle", "burn"):
        check = copy / f"results/own/{FAMILY}/check-{kind}-cpu.json"
        assert check.is_file(), f"{kind}'s port was not checked before training"
    # No runner of its own: the workflow's runners carry the family.
    assert not (copy / "results/bin/own").exists()
