"""The end-to-end tests' configs in .test/ (no workflow run): each is a valid config once
merged over config.yaml, says what it is for and how to run it, and chooses its experiments
explicitly, so an experiment added to config.yaml does not silently join a test run."""

import re

import pytest

from parity.core.configcheck import schema_errors
from parity.plan.plan import Plan
from parity.probe.plan import ProbePlan

from conftest import REPO, TEST_CONFIGS, check_runs_as_written, load_config, load_test_config

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


def test_a_test_config_that_replaces_a_section_is_refused_before_it_runs():
    """Snakemake merges a test's config over config.yaml, so experiments a test dropped by
    replacing the dict come back and run (the report test once ran every experiment)."""
    config = load_config()
    config["experiments"] = {"a3_sgd": config["experiments"]["a3_sgd"]}
    with pytest.raises(pytest.fail.Exception, match=r"experiments\.a3_adamw"):
        check_runs_as_written(config)
    config["probes"] = {"select": ["conv1d_grad"]}  # fp64_rule and dtypes come back too
    with pytest.raises(pytest.fail.Exception, match=r"probes\.dtypes"):
        check_runs_as_written(config)


def test_a_test_config_that_leaves_experiments_out_properly_runs_as_written():
    check_runs_as_written(load_test_config("tiny"))
    config = load_config()
    config["only"] = ["a3_sgd"]
    config["probes"].update(select=["conv1d_grad"])
    check_runs_as_written(config)
    check_runs_as_written({"experiments": {"a3_sgd": {"steps": 3}}})  # overrides only
