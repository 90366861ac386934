"""The end-to-end tests' configs in .test/ (no workflow run): each is a valid config once
merged over config.yaml, says what it is for and how to run it, and chooses its experiments
explicitly, so an experiment added to config.yaml does not silently join a test run."""

import re

import pytest

from parity.core.configcheck import schema_errors
from parity.plan.plan import Plan
from parity.probe.plan import ProbePlan

from conftest import REPO, TEST_CONFIGS, load_config, load_test_config

NAMES = sorted(p.stem for p in TEST_CONFIGS.glob("*.yaml"))


def test_the_workflow_tests_configs_are_there():
    assert {"short", "probes", "faults", "devices", "reliability", "determinism"} <= set(NAMES)
    assert {"slurm", "tiny"} <= set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_header_says_what_it_is_for_and_the_command(name):
    text = (TEST_CONFIGS / f"{name}.yaml").read_text(encoding="utf-8")
    header = text.split("\n\n")[0].splitlines()
    comments = [line for line in header if line.startswith("#")]
    assert len(comments) >= 3, "a comment header saying what the config is for"
    assert any("tests/test_" in line for line in comments), "which test runs it"
    commands = [line for line in comments if re.match(r"#\s+snakemake ", line)]
    assert any(f"--configfile .test/{name}.yaml" in c for c in commands), commands


@pytest.mark.parametrize("name", NAMES)
def test_merged_config_is_valid(name):
    config = load_test_config(name)
    assert schema_errors(config, str(REPO / "schemas" / "config.schema.yaml")) == []
    assert Plan(config).runs()
    ProbePlan.from_config(config, REPO)


#: The configs that choose experiments (probes.yaml keeps config.yaml's: its target, the
#: probe table, does not run them).
CHOOSING = [n for n in NAMES if "experiments" in load_config(TEST_CONFIGS / f"{n}.yaml")]


@pytest.mark.parametrize("name", CHOOSING)
def test_every_experiment_of_config_yaml_is_chosen_explicitly(name):
    own = load_config(TEST_CONFIGS / f"{name}.yaml")
    assert set(load_config()["experiments"]) <= set(own["experiments"])
