"""A user's burn port through the real workflow (docs/own-model.md): the tiny MLP-Mixer of
examples/tiny_mixer (a PyTorch factory, its burn port loaded by burn-store) copied to a
folder outside the repository, its crate pointed at this checkout's parity-common, three
steps with real torch and real burn; then a port whose parameter name the remapping does
not produce, refused by own_check before any training job."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from test_own_workflow import snakemake, summary

from conftest import REPO, use_our_parity_common

pytestmark = pytest.mark.workflow

EXAMPLE = Path("examples") / "tiny_mixer"


def copy_mixer(dest: Path, only: list[str], steps: int = 3) -> Path:
    """The example as a user copies it (the factory path in its config is relative to the
    working folder, so the folder keeps ``examples/tiny_mixer``): its Cargo.toml's
    parity-common path set to this checkout's, ``steps`` steps of the experiments
    ``only``."""
    shutil.copytree(REPO / EXAMPLE, dest / EXAMPLE, ignore=shutil.ignore_patterns("target"))
    use_our_parity_common(dest / EXAMPLE / "burn-port" / "Cargo.toml")
    cfg = yaml.safe_load((dest / EXAMPLE / "config.yaml").read_text())
    cfg["only"] = only
    for name in only:
        cfg["experiments"][name]["steps"] = steps
    (dest / "config.yaml").write_text(yaml.safe_dump(cfg))
    return dest


def run(folder: Path, *targets: str, check: bool = True):
    # The targets go first: --configfile takes every word after it.
    return snakemake(
        folder,
        *targets,
        "--snakefile",
        str(REPO / "Snakefile"),
        "--configfile",
        "config.yaml",
        check=check,
    )


@pytest.fixture(scope="module")
def mixer_run(tmp_path_factory):
    folder = copy_mixer(tmp_path_factory.mktemp("user") / "mixer", ["mixer_relu"])
    run(folder)
    return folder


def test_the_burn_port_trains_like_pytorch_for_three_steps(mixer_run):
    row = summary(mixer_run)[("mixer_relu", "main")]
    assert row["verdict"] == "pass", row
    assert (mixer_run / "results" / "bin" / "own" / "mixer_relu-burn-cpu").is_file()
    check = json.loads(
        (mixer_run / "results" / "own" / "mixer_relu" / "check-burn-cpu.json").read_text()
    )
    inspection = check["inspection"]
    # burn-store's adapter found every PyTorch key, in PyTorch layout: the Linear weights
    # [out, in], the LayerNorms' weight/bias for burn's gamma/beta.
    params = dict((n, s) for n, s in inspection["params"])
    assert params["blocks.0.token_mlp.0.weight"] == [16, 4]
    assert params["blocks.0.channel_mlp.2.weight"] == [8, 16]
    assert params["blocks.1.norm2.bias"] == [8]
    assert params["head.weight"] == [3, 8]
    assert len(params) == 26
    assert inspection["missing"] == [] and inspection["build_error"] is None
    assert inspection["output_shape"] == [8, 3]
    assert inspection["no_grad"] == []
    assert inspection["taps"][:5] == [
        "blocks.0.norm1",
        "blocks.0.token_mlp.0",
        "blocks.0.token_mlp.1",
        "blocks.0.token_mlp.2",
        "blocks.0.token_mlp",
    ]


def test_a_parameter_the_remapping_misses_is_refused_before_any_training_job(tmp_path):
    folder = copy_mixer(tmp_path / "mixer", ["mixer_relu"])
    lib = folder / EXAMPLE / "burn-port" / "src" / "lib.rs"
    text = lib.read_text()
    for old, new in [
        ("    head: Linear,", "    classifier: Linear,"),
        ("            head: LinearConfig", "            classifier: LinearConfig"),
        ("self.head.forward", "self.classifier.forward"),
    ]:
        assert old in text, old
        text = text.replace(old, new)
    lib.write_text(text)
    # Only the check's inputs (the fixture, the build) run before it.
    proc = run(folder, "results/own/mixer_relu/check-burn-cpu.json", check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "the burn port does not match the PyTorch model" in out
    assert "classifier.weight" in out and "head.weight" in out
    assert not (folder / "results" / "own" / "mixer_relu" / "check-burn-cpu.json").exists()
