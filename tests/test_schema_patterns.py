"""Every pattern of the config and probe schemas matches at the true end of a value.

Python's ``re.search`` (what jsonschema runs) lets ``$`` match before a final newline, so a
pattern such as ``^[a-z][a-z0-9_]*$`` accepted an experiment named ``"ax\\n"``, whose paths
Snakemake then could not build. Each pattern therefore ends in ``(?!\\n)$`` (portable: in
ECMA-262, the schemas' own dialect, ``$`` only matches at the end and the lookahead is
harmless). Checked here for every pattern, property-name pattern and pattern-property key of
both schemas, on every value the repository's configs and probe files hold that the pattern
accepts, and on the names the workflow uses.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import jsonschema
import pytest
import yaml

from conftest import REPO, load_config

SCHEMAS = [REPO / "schemas" / "config.schema.yaml", REPO / "schemas" / "probe.schema.yaml"]


def patterns(node, where="") -> Iterator[tuple[str, str]]:
    """(key path, pattern) of every regular expression in a schema."""
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "pattern" and isinstance(v, str):
                yield where, v
            elif k == "patternProperties" and isinstance(v, dict):
                for key in v:
                    yield f"{where}.patternProperties", key
            yield from patterns(v, f"{where}.{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from patterns(v, f"{where}[{i}]")


def strings(node) -> Iterator[str]:
    """Every key and string value of a parsed document."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield str(k)
            yield from strings(v)
    elif isinstance(node, list):
        for v in node:
            yield from strings(v)
    elif isinstance(node, str):
        yield node


def corpus() -> set[str]:
    docs = [REPO / "config.yaml", *sorted((REPO / "probes").glob("*.yaml"))]
    docs += sorted((REPO / "tests" / "probes" / "ops").glob("*.yaml"))
    docs += sorted((REPO / ".test").glob("*.yaml"))
    docs += sorted((REPO / "examples").glob("*/config.yaml"))
    out = {
        "a3_sgd",
        "torch_fused",
        "candle_v0_11_1",
        "0.11.1",
        "mac",
        "user@mac.local",
        "~/parity",
        "PARITY_X",
        "fc1.weight",
        "w.grad",
        "model.py:make",
        "TinyLlama",
        "models::TinyLlama",
        "LlamaForCausalLM",
    }
    for d in docs:
        out |= set(strings(yaml.safe_load(d.read_text(encoding="utf-8"))))
    return {s for s in out if "\n" not in s}


ALL = [(s.name, w, p) for s in SCHEMAS for w, p in patterns(yaml.safe_load(s.read_text()))]


@pytest.mark.parametrize(("schema", "where", "pattern"), ALL, ids=[f"{a}{b}" for a, b, _ in ALL])
def test_no_pattern_accepts_a_value_with_a_trailing_newline(schema, where, pattern):
    accepted = [s for s in corpus() if re.search(pattern, s)]
    assert accepted, f"{schema}{where}: no example value matches {pattern!r}; add one"
    for s in accepted:
        assert not re.search(pattern, s + "\n"), f"{schema}{where}: {pattern!r} takes {s!r}+\\n"


def test_the_patterns_were_found():
    assert len(ALL) > 20


def _config_schema():
    return yaml.safe_load(SCHEMAS[0].read_text())


@pytest.mark.parametrize(
    "mutate",
    [
        lambda c: c["experiments"].update({"ax\n": c["experiments"]["a3_sgd"]}),
        lambda c: c["experiments"]["a3_sgd"]["runs"].update({"torch\n": {}}),
        lambda c: c["candle"].update(versions=["0.11.0\n"]),
        lambda c: c.update(only=["a3_sgd\n"]),
        lambda c: c.update(remote={"mac\n": {"ssh": "u@m", "path": "p", "devices": ["cpu"]}}),
    ],
    ids=["experiment", "run", "version", "only", "remote host"],
)
def test_a_config_name_with_a_trailing_newline_is_refused(mutate):
    c = load_config()
    mutate(c)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(c, _config_schema())


def test_the_unchanged_config_passes():
    jsonschema.validate(load_config(), _config_schema())


def test_every_schema_pattern_is_anchored_at_the_true_end():
    loose = [(s, w, p) for s, w, p in ALL if not p.endswith("(?!\\n)$")]
    assert not loose, f"patterns ending in a plain $ (which takes a final newline): {loose}"


def test_the_workflows_own_name_patterns_match_whole_names():
    from parity.plan import frameworks, versions
    from parity.probe.format import NAME

    assert not NAME.match("ab\n") and not versions.VERSION_RE.match("0.11.0\n")
    assert not frameworks.RUN_NAME.match("torch\n") and frameworks.RUN_NAME.match("torch_x")


def test_the_json_config_schema_is_the_yaml_one():
    """rules/common.smk validates against the JSON twin; the YAML file is the source."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "schema_json", REPO / "scripts" / "dev" / "schema_json.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    text = (REPO / "schemas" / "config.schema.json").read_text(encoding="utf-8")
    assert text == module.render(), "run python scripts/dev/schema_json.py"
    assert json.loads(text) == yaml.safe_load((REPO / "schemas" / "config.schema.yaml").read_text())
