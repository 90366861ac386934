"""The conda environments (envs/*.yaml, for --use-conda) pin what requirements.txt pins."""

import re

import pytest
import yaml

from conftest import REPO

ENVS = sorted((REPO / "envs").glob("*.yaml"))


def _pins(lines):
    out = {}
    for line in lines:
        m = re.match(r"^\s*([A-Za-z0-9_.-]+)==([^\s#]+)", line)
        if m:
            out[m[1].lower().replace("_", "-")] = m[2]
    return out


REQUIREMENTS = _pins((REPO / "requirements.txt").read_text().splitlines())


@pytest.mark.parametrize("env", ENVS, ids=[p.stem for p in ENVS])
def test_each_pip_pin_of_an_environment_equals_requirements_txt(env):
    doc = yaml.safe_load(env.read_text())
    pip = next((d["pip"] for d in doc["dependencies"] if isinstance(d, dict)), [])
    pins = _pins(pip)
    lock = _pins((REPO / "requirements.lock").read_text().splitlines())
    for name, version in pins.items():
        want = REQUIREMENTS.get(name, lock.get(name))
        assert want == version, f"{env.name}: {name}=={version}, requirements pin {want}"


def test_the_localise_environment_has_what_its_job_imports():
    doc = yaml.safe_load((REPO / "envs" / "torch.yaml").read_text())
    pins = _pins(next(d["pip"] for d in doc["dependencies"] if isinstance(d, dict)))
    assert {"torch", "numpy", "pyarrow", "safetensors", "matplotlib"} <= set(pins)
