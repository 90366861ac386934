"""Reading YAML strictly and within bounds, finite numbers, and the size estimates that
refuse a config or a probe file before anything is allocated (docs/bad-input.md)."""

import copy
import math
import time

import pytest

from parity.core import yamlfile
from parity.core.config import ConfigError, merge
from parity.plan import limits
from parity.plan.plan import Plan
from parity.probe import limits as probe_limits
from parity.probe.format import ProbeError
from parity.probe.loader import load
from parity.train.rust import RunnerError, spec_json
from test_probes import CONV1D, write_probe

from conftest import REPO, load_config

# ----- YAML ------------------------------------------------------------------------------


def test_a_key_given_twice_is_refused_with_both_lines(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("tolerance: 1.0e-6\nthreads: 1\ntolerance: 0.5\n")
    with pytest.raises(yamlfile.YamlError) as e:
        yamlfile.load(path)
    assert str(e.value) == (
        f"{path}: line 3: duplicate key 'tolerance' (first given at line 1): YAML would keep "
        "the last value silently; give it once"
    )
    with pytest.raises(yamlfile.YamlError, match="line 1: duplicate key 'a'"):
        yamlfile.loads("x: {a: 1, a: 2}")  # one line, a flow mapping
    with pytest.raises(yamlfile.YamlError, match="line 3: duplicate key 'b'"):
        yamlfile.loads("x:\n  b: 1\n  b: 2\n")


def test_merge_keys_and_aliases_are_not_duplicates():
    doc = yamlfile.loads("a: &m {b: 1, c: 2}\nd:\n  <<: *m\n  c: 3\ne: *m\n")
    assert doc == {"a": {"b": 1, "c": 2}, "d": {"b": 1, "c": 3}, "e": {"b": 1, "c": 2}}
    assert yamlfile.load(REPO / "config.yaml")["tolerance"] == 1.0e-6


def test_a_file_over_the_size_limit_is_not_parsed(tmp_path):
    path = tmp_path / "big.yaml"
    path.write_text("a: [" + "1, " * 1000 + "1]\n")
    with pytest.raises(
        yamlfile.YamlError,
        match=r"3007 bytes, more than limits\.max_yaml_bytes \(1000\); nothing was parsed",
    ):
        yamlfile.load(path, max_bytes=1000)


def test_alias_bombs_self_references_and_deep_nesting_stay_bounded():
    bomb = "a0: &a0 [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n" + "".join(
        f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]\n" for i in range(1, 10)
    )
    start = time.monotonic()
    with pytest.raises(yamlfile.YamlError, match=r"more than limits\.max_yaml_nodes"):
        yamlfile.loads(bomb, "bomb.yaml")  # 10^10 values when expanded
    assert time.monotonic() - start < 10
    with pytest.raises(yamlfile.YamlError, match=r"nested more than 64 levels"):
        yamlfile.loads("a: &a [1, *a]\n")  # refers to itself: endless when walked
    with pytest.raises(yamlfile.YamlError, match="nested more than 64 levels"):
        yamlfile.loads("a: " + "[" * 100 + "]" * 100)
    with pytest.raises(yamlfile.YamlError, match="not valid YAML"):
        yamlfile.loads("a: !!python/object/apply:os.system ['true']\n")


@pytest.mark.parametrize(
    ("text", "fixed"),
    [
        ("1e-6", "1.0e-6"),
        ("1e6", "1.0e+6 (or 1000000)"),
        ("2.5E3", "2.5e+3 (or 2500)"),
        ("3.e4", "3.0e+4 (or 30000)"),
    ],
)
def test_number_hint_says_why_and_how(text, fixed):
    assert yamlfile.loads(f"x: {text}\n")["x"] == text  # YAML 1.1 reads it as text
    hint = yamlfile.number_hint(text)
    assert "takes " + repr(text) + " as text" in hint
    assert hint.endswith("write " + fixed)
    assert isinstance(yamlfile.loads(f"x: {fixed.split()[0]}\n")["x"], float)


def test_number_hint_leaves_other_text_alone():
    assert yamlfile.number_hint("fast") is None
    assert yamlfile.number_hint(1e-6) is None


# ----- finite numbers --------------------------------------------------------------------


def test_non_finite_values_are_found_with_their_key_path():
    doc = {"a": [1.0, math.nan, {"b": -math.inf}], "c": {"d": math.inf}, "e": 2}
    assert [(w, limits.yaml_text(v)) for w, v in limits.non_finite(doc)] == [
        ("a[1]", ".nan"),
        ("a[2].b", "-.inf"),
        ("c.d", ".inf"),
    ]
    with pytest.raises(ConfigError, match=r"tolerance: \.nan is not a finite number"):
        limits.check_config_numbers({"tolerance": math.nan})


def test_the_runner_spec_never_carries_nan_or_infinity():
    assert spec_json({"optimizer": {"lr": 0.1}}) == '{\n "optimizer": {\n  "lr": 0.1\n }\n}'
    with pytest.raises(RunnerError, match=r"optimizer\.lr = nan, optimizer\.betas\[1\] = inf"):
        spec_json({"optimizer": {"lr": math.nan, "betas": [0.9, math.inf]}})


# ----- training runs ---------------------------------------------------------------------


def test_the_default_and_the_scale_configs_are_within_the_limits():
    config = load_config()
    assert config["limits"] == limits.DEFAULTS  # config.yaml spells out the defaults
    limits.check_plan(Plan(config), limits.settings(config))
    scale = merge(config, yamlfile.load(REPO / "bench" / "scale.yaml"))
    plan = Plan(scale)
    limits.check_plan(plan, limits.settings(scale))
    est = limits.run_estimate(plan.run_settings("scale_mlp", "torch"), 8)
    # docs/performance.md: 21 rows of 15 MB in float64
    assert est["rows"] == 21 and 300e6 < est["trace_bytes"] < 320e6


def test_recorded_rows_are_counted_without_listing_them():
    from parity.trace.schema import recorded_steps

    for steps, every in [(1, 1), (10, 3), (12, 4), (100, 10), (7, 100)]:
        assert limits.recorded_rows(steps, every) == len(recorded_steps(steps, every))
    assert limits.recorded_rows(10**18, 1) == 10**18 + 1  # instantly


def test_limits_are_config_keys():
    config = copy.deepcopy(load_config())
    config["limits"] = {"max_steps": 50}
    lim = limits.settings(config)
    assert lim["max_steps"] == 50 and lim["max_tensor_elements"] == 100_000_000
    with pytest.raises(ConfigError) as e:
        limits.check_plan(Plan(config), lim)
    assert "config: experiments.a3_adamw.steps: steps: 100, more than limits.max_steps (50)" in (
        str(e.value)
    )


# ----- probes ----------------------------------------------------------------------------


def probe(tmp_path, inputs, steps, compare=("y",)):
    doc = {
        "description": "size",
        "inputs": inputs,
        "cases": {"c": {"steps": steps, "compare": list(compare)}},
    }
    return write_probe(tmp_path, "size", doc)


def sizes(doc):
    return {(w, what): n for w, what, n in probe_limits.probe_tensor_sizes(doc)}


def test_probe_shapes_are_inferred_through_every_kind_of_op():
    doc = {
        "inputs": {
            "x": {"arange": {}, "shape": [2, 3, 8]},
            "w": {"values": [[[1, 2, 3]]] * 4},
            "m": {"ones": [5, 3, 2]},
            "v": {"zeros": [1, 1]},
        },
        "cases": {
            "c": {
                "steps": [
                    {"transpose": {"in": "x", "dim0": 0, "dim1": -1, "out": "t"}},
                    {"narrow": {"in": "t", "dim": 0, "start": 1, "length": 3, "out": "n"}},
                    {"unsqueeze": {"in": "n", "dim": -1, "out": "u"}},
                    {"squeeze": {"in": "u", "dim": 3, "out": "s"}},
                    {"conv1d": {"in": ["x", "w"], "out": "k", "padding": 1, "stride": 2}},
                    {"matmul": {"in": ["m", "m2"], "out": "mm"}},
                    {"broadcast_to": {"in": "v", "shape": [4, 6], "out": "b"}},
                    {"add": {"in": ["v", "b"], "out": "a"}},
                    {"linear": {"in": ["b", "b"], "out": "l"}},
                    {"upsample_nearest1d": {"in": "k", "size": 9, "out": "up"}},
                    {"bce_with_logits": {"in": ["b", "b"], "out": "loss1"}},
                ]
            }
        },
    }
    got = sizes(doc)
    steps = "cases.c.steps"
    assert got[("inputs.x.shape", "shape [2, 3, 8]")] == 48
    assert got[("inputs.w.values", "values")] == 12
    assert got[(f"{steps}[0].transpose", "output shape [8, 3, 2]")] == 48
    assert got[(f"{steps}[1].narrow", "output shape [3, 3, 2]")] == 18
    assert got[(f"{steps}[2].unsqueeze", "output shape [3, 3, 2, 1]")] == 18
    assert got[(f"{steps}[3].squeeze", "output shape [3, 3, 2]")] == 18
    # conv1d of [2, 3, 8] by [4, 1, 3]: l_out = (8 + 2 - 2 - 1) // 2 + 1 = 4
    assert got[(f"{steps}[4].conv1d", "output shape [2, 4, 4]")] == 32
    assert got[(f"{steps}[4].conv1d", "im2col buffer")] == 2 * 4 * 3
    assert (f"{steps}[5].matmul", "output shape") not in {(w, s[:12]) for w, s in got}
    assert got[(f"{steps}[6].broadcast_to", "output shape [4, 6]")] == 24
    assert got[(f"{steps}[7].add", "output shape [4, 6]")] == 24
    assert got[(f"{steps}[8].linear", "output shape [4, 4]")] == 16
    assert got[(f"{steps}[9].upsample_nearest1d", "output shape [2, 4, 9]")] == 72
    assert got[(f"{steps}[10].bce_with_logits", "output shape []")] == 1


def test_matmul_broadcasts_batches_as_pytorch_does():
    doc = {
        "inputs": {"a": {"ones": [1, 8, 8]}, "b": {"ones": [4, 8, 3]}, "c": {"ones": [8]}},
        "cases": {
            "c": {
                "steps": [
                    {"matmul": {"in": ["a", "b"], "out": "y"}},
                    {"matmul": {"in": ["c", "b"], "out": "z"}},
                ]
            }
        },
    }
    got = sizes(doc)
    assert got[("cases.c.steps[0].matmul", "output shape [4, 8, 3]")] == 96
    assert got[("cases.c.steps[1].matmul", "output shape [4, 3]")] == 12


def test_every_probe_op_has_its_output_shape_inferred():
    from parity.probe.ops import op_names

    assert set(op_names()) == probe_limits.SHAPE_OPS


def test_repository_probes_are_small():
    for path in sorted((REPO / "probes").glob("*.yaml")):
        doc = yamlfile.load(path)
        assert max(n for _, _, n in probe_limits.probe_tensor_sizes(doc)) <= 1000, path.name


@pytest.mark.parametrize(
    ("inputs", "steps", "field", "words"),
    [
        ({"y": {"ones": [100000, 100000]}}, [], "inputs.y.ones", "holds 10000000000 elements"),
        ({"y": {"zeros": [10, 10, 10, 10, 10, 10, 10]}}, [], "inputs.y.zeros", "10000000 elem"),
        (
            {"y": {"arange": {"scale": 2}, "shape": [2000, 1000]}},
            [],
            "inputs.y.shape",
            "holds 2000000 elements",
        ),
        (
            {"a": {"values": [1.0]}},
            [{"broadcast_to": {"in": "a", "shape": [100000, 100000], "out": "y"}}],
            "cases.c.steps[0].broadcast_to",
            "output shape [100000, 100000] holds 10000000000 elements",
        ),
        (
            {"a": {"ones": [1, 1, 1]}},
            [
                {"reshape": {"in": "a", "shape": [1, 1], "out": "b"}},
                {"upsample_nearest2d": {"in": "b", "size": [1, 1], "out": "c"}},
                {"broadcast_to": {"in": "a", "shape": [2000, 1, 1000], "out": "d"}},
                {"matmul": {"in": ["d", "d"], "out": "y"}},
            ],
            "cases.c.steps[2].broadcast_to",
            "holds 2000000 elements",
        ),
        (
            {"a": {"ones": [1, 1, 300000]}, "w": {"ones": [1, 1, 300]}},
            [{"conv1d": {"in": ["a", "w"], "out": "y"}}],
            "cases.c.steps[0].conv1d",
            "im2col buffer holds 89910300 elements",
        ),
        (
            {"y": {"arange": {"start": math.nan}, "shape": [2]}},
            [],
            "inputs.y.arange.start",
            ".nan is not",
        ),
        ({"y": {"zeros": [0, 10**30]}}, [], "inputs.y.zeros[1]", "larger than 2^53"),
        (
            {"a": {"ones": [4]}},
            [{"narrow": {"in": "a", "dim": 0, "start": 10**20, "length": 1, "out": "y"}}],
            "cases.c.steps[0].narrow.start",
            "no runner takes an integer that large",
        ),
        (
            {"y": {"arange": {"start": 1.0e308, "scale": 1.0e308}, "shape": [4]}},
            [],
            "inputs.y.arange",
            "its values grow beyond float64",
        ),
    ],
)
def test_oversized_or_non_finite_probes_are_refused_by_field(tmp_path, inputs, steps, field, words):
    path = probe(tmp_path, inputs, steps)
    with pytest.raises(ProbeError) as e:
        load(path)
    assert e.value.field == field
    assert words in e.value.problem
    assert str(path) in str(e.value)


def test_probe_limit_is_a_config_key(tmp_path):
    path = probe(tmp_path, {"y": {"ones": [10, 10]}}, [])
    load(path)
    with pytest.raises(ProbeError, match=r"more than limits\.max_probe_tensor_elements \(50\)"):
        load(path, {**limits.DEFAULTS, "max_probe_tensor_elements": 50})


def test_a_probe_tolerance_written_1e_minus_6_is_the_number(tmp_path):
    doc = copy.deepcopy(CONV1D)
    doc["tolerance"] = {"f32": "1e-6"}
    assert load(write_probe(tmp_path, "conv", doc)).tolerance("f32") == 1e-6
    # Where the number cannot be taken (an integer argument), the message says why.
    doc["cases"]["batch2"]["steps"][0]["conv1d"]["padding"] = "1.5e0"
    with pytest.raises(ProbeError) as e:
        load(write_probe(tmp_path, "conv", doc))
    assert e.value.field == "cases.batch2.steps[0].conv1d.padding"
    assert "written '1.5e0', which YAML 1.1 reads as text" in e.value.problem
