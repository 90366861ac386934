"""Every key of the config and probe schemas keeps the line on what a value may hold, so a
new key cannot let through what the old ones refuse (docs/bad-input.md):

* every list whose items are text (names of tensors, runs, experiments, devices, dtypes,
  releases, ops, paths) is ``uniqueItems``: a name given twice is refused at its key, not
  met later as a trace the reader calls corrupt; the few lists whose items may repeat (an
  op's operands in order, ``matmul(a, a)``) are listed here with the reason;
* every text value has a ``pattern`` (or is an ``enum``/``const``): free text and paths use
  ``$defs/text`` / ``$defs/path``, one line without control characters;
* no pattern takes a control character: a line break, a tab, NUL, ESC, DEL (and outside
  ``remote``, whose shell-quoting rules are its own, the C1 controls and U+2028/U+2029),
  which would break a Markdown or CSV row, start a heading or reach a terminal.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import jsonschema
import pytest
import yaml

from parity.core.configcheck import key_path
from test_schema_patterns import corpus

from conftest import REPO, load_config

SCHEMAS = {
    "config": REPO / "schemas" / "config.schema.yaml",
    "probe": REPO / "schemas" / "probe.schema.yaml",
}

#: Lists whose text items may repeat, and why: (schema, key path) → reason.
REPEATS = {
    ("probe", ".$defs.in1.oneOf[1]"): "an op's operand, in order",
    ("probe", ".$defs.in2"): "an op's operands in order: mul(a, a) is a square",
    ("probe", ".$defs.in2or3"): "an op's operands in order",
    ("probe", ".$defs.in3"): "an op's operands in order",
    ("probe", ".$defs.ops.linear.properties.in"): "linear's operands in order",
    ("probe", ".$defs.ops.layer_norm.properties.in"): "layer_norm's operands in order",
    ("probe", ".$defs.input_values.oneOf[2]"): "values (inf, -inf, nan), not names",
}

#: Control characters no pattern may take (each a line break, invisible, or a terminal's).
C0 = [chr(c) for c in range(0x20)]
#: Refused by every pattern outside ``remote`` too: DEL, the C1 controls, U+2028, U+2029.
WIDER = ["\x7f", *(chr(c) for c in range(0x80, 0xA0)), "\u2028", "\u2029"]
#: The example values (test_schema_patterns.corpus), read once.
CORPUS = sorted(corpus())


def load(name: str) -> dict:
    return yaml.safe_load(SCHEMAS[name].read_text(encoding="utf-8"))


def nodes(node, where: str = "") -> Iterator[tuple[str, dict]]:
    """(key path, sub-schema) of every mapping in a schema."""
    if isinstance(node, dict):
        yield where, node
        for k, v in node.items():
            yield from nodes(v, f"{where}.{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from nodes(v, f"{where}[{i}]")


def _deref(schema: dict, node):
    for _ in range(10):
        if not (isinstance(node, dict) and "$ref" in node):
            return node
        node = schema["$defs"][node["$ref"].rsplit("/", 1)[-1]]
    return node


def is_text(schema: dict, node) -> bool:
    """Whether ``node`` (a sub-schema, through its ``$ref``) takes text."""
    node = _deref(schema, node)
    if not isinstance(node, dict):
        return False
    kind = node.get("type")
    if kind == "string" or (isinstance(kind, list) and "string" in kind):
        return True
    if "enum" in node and all(isinstance(e, str) for e in node["enum"]):
        return True
    return any(is_text(schema, n) for k in ("oneOf", "anyOf") for n in node.get(k, []))


WALK = [(name, where, node) for name in SCHEMAS for where, node in nodes(load(name))]


def test_every_list_of_names_refuses_a_name_given_twice():
    loose = []
    for name, where, node in WALK:
        if (
            node.get("type") == "array"
            and "items" in node
            and is_text(load(name), node["items"])
            and not node.get("uniqueItems")
            and (name, where) not in REPEATS
        ):
            loose.append(f"{name}{where}")
    assert not loose, f"lists of text without uniqueItems (or a reason in REPEATS): {loose}"
    # the exceptions still exist, so the list above cannot go stale in silence
    where_of = {(n, w) for n, w, _ in WALK}
    assert set(REPEATS) <= where_of


def test_every_text_value_has_a_pattern():
    free = [
        f"{name}{where}"
        for name, where, node in WALK
        if (node.get("type") == "string" or node.get("type") == ["string", "null"])
        and not any(k in node for k in ("pattern", "enum", "const", "format"))
    ]
    assert not free, f"text without a pattern (use $defs/text or $defs/path): {free}"


PATTERNS = [
    (name, where, node["pattern"])
    for name, where, node in WALK
    if isinstance(node.get("pattern"), str)
] + [
    (name, f"{where}.propertyNames", node["propertyNames"]["pattern"])
    for name, where, node in WALK
    if isinstance(node.get("propertyNames"), dict) and "pattern" in node["propertyNames"]
]


@pytest.mark.parametrize(
    ("schema", "where", "pattern"), PATTERNS, ids=[f"{a}{b}" for a, b, _ in PATTERNS]
)
def test_no_pattern_takes_a_control_character(schema, where, pattern):
    accepted = [s for s in CORPUS if s and re.search(pattern, s)]
    assert accepted, f"{schema}{where}: no example value matches {pattern!r}"
    refused = C0 + ([] if ".properties.remote." in where else WIDER)
    for s in accepted[:20]:
        for c in refused:
            for bad in (s[:1] + c + s[1:], s + c, c + s):
                assert not re.search(pattern, bad), f"{schema}{where}: {pattern!r} takes {bad!r}"


def test_the_walk_found_the_keys():
    assert len(PATTERNS) > 25
    assert sum(1 for _, _, n in WALK if n.get("uniqueItems")) > 15


@pytest.mark.parametrize(
    ("key", "mutate"),
    [
        ("framework_summary[0].label", lambda c: c["framework_summary"][0].update(label="A\nB")),
        ("framework_summary[0].label", lambda c: c["framework_summary"][0].update(label="A\u2028")),
        (
            "experiments.a3_sgd.record.tensors",
            lambda c: c["experiments"]["a3_sgd"].update(record={"tensors": ["fc1.weight"] * 2}),
        ),
        (
            "experiments.a3_sgd.description",
            lambda c: c["experiments"]["a3_sgd"].update(description="tab\there"),
        ),
        ("probes.folder", lambda c: c.update(probes={"folder": "pro\x00bes"})),
    ],
    ids=["line break", "U+2028", "record tensors twice", "tab", "NUL in a path"],
)
def test_the_schema_refuses_at_the_key(key, mutate):
    c = load_config()
    c["experiments"] = {k: dict(v) for k, v in c["experiments"].items()}
    c["framework_summary"] = [dict(r) for r in c["framework_summary"]]
    mutate(c)
    errors = list(jsonschema.Draft202012Validator(load("config")).iter_errors(c))
    assert key in {key_path(e.absolute_path) for e in errors}, errors
