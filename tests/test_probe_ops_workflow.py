"""End-to-end: the op probes of tests/probes/ops (every op of probe language v2, exact
values computed by hand, checked by tests/probes/ops/check_values.py) through the real
workflow with PyTorch, candle and burn in float32, float64, float16 and bfloat16 on the
CPU. Every verdict must be accepted; where a framework differs from PyTorch the probe file
records it as a known bug, and the rows below pin what was found."""

import csv

import pytest

from conftest import REPO, load_config, run_workflow

pytestmark = pytest.mark.workflow

TABLE = "results/tables/probes.csv"
ACCEPTED = {"pass", "reference", "known-bug", "unsupported"}


@pytest.fixture(scope="module")
def ops_rows(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("ops")
    config = load_config()
    config["candle"]["versions"] = ["0.11.0"]  # the release axis: test_versions_workflow.py
    config["burn"]["versions"] = ["0.22.1"]
    config["probes"].update(
        folder=str(REPO / "tests/probes/ops"),
        dtypes=["f32", "f64", "f16", "bf16"],
    )
    run_workflow(workdir, config, "--cores", "2", TABLE)
    with open(workdir / TABLE, encoding="utf-8") as f:
        return list(csv.DictReader(f))


def row(rows, probe, case, quantity, framework, dtype="f32"):
    (r,) = [
        r
        for r in rows
        if (r["probe"], r["case"], r["quantity"], r["framework"], r["dtype"])
        == (probe, case, quantity, framework, dtype)
    ]
    return r


def test_every_verdict_is_accepted(ops_rows):
    bad = [
        (r["probe"], r["case"], r["quantity"], r["framework"], r["dtype"], r["verdict"])
        for r in ops_rows
        if r["verdict"] not in ACCEPTED
    ]
    assert not bad


def test_exact_values_hold_in_every_framework_that_runs_them(ops_rows):
    """PyTorch meets every exact value in float32 and float64; candle and burn meet each one
    they support, except the recorded known bugs, and each runs a good share of them."""
    for fw, least in (("torch", 300), ("candle", 150), ("burn", 250)):
        exact = [
            r
            for r in ops_rows
            if r["framework"] == fw and r["dtype"] in ("f32", "f64") and r["reference"] == "exact"
        ]
        verdicts = {r["verdict"] for r in exact}
        assert verdicts <= ({"pass"} if fw == "torch" else {"pass", "known-bug"})
        assert sum(r["verdict"] == "pass" for r in exact) >= least, fw


@pytest.mark.parametrize("framework", ["torch", "candle", "burn"])
def test_index_ops_add_gradients_of_repeated_indices(ops_rows, framework):
    r = row(ops_rows, "indexing", "embedding_repeats", "emb.grad", framework)
    assert (r["reference"], r["verdict"]) == ("exact", "pass")


@pytest.mark.parametrize("framework", ["torch", "candle", "burn"])
def test_a_refused_case_passes_on_an_error(ops_rows, framework):
    for case in ("matmul_shape_mismatch", "add_unequal_shapes", "gather_index_out_of_range"):
        r = row(ops_rows, "errors", case, "y", framework)
        assert r["verdict"] == "pass"
        assert r["note"].startswith("error as expected: ")


def test_optimizer_loops_stack_their_quantities(ops_rows):
    """Three SGD steps with momentum: every quantity gains a leading dimension of 3, and
    burn's momentum buffer equals PyTorch's exact values; candle_nn::SGD has no momentum."""
    for q, shape in (("loss", "[3]"), ("p.grad", "[3, 4]"), ("p.momentum_buffer", "[3, 4]")):
        for fw in ("torch", "burn"):
            r = row(ops_rows, "optimizers", "sgd_momentum_dampening", q, fw)
            assert (r["shape"], r["verdict"]) == (shape, "pass")
        r = row(ops_rows, "optimizers", "sgd_momentum_dampening", q, "candle")
        assert r["verdict"] == "unsupported" and "momentum" in r["note"]


def test_known_faults_found_by_the_op_probes_reproduce(ops_rows):
    # Tied maxima: PyTorch's amax shares the gradient; candle and burn do not.
    for fw in ("candle", "burn"):
        for dtype in ("f32", "f64"):
            r = row(ops_rows, "reductions", "max_all_ties", "x.grad", fw, dtype)
            assert r["verdict"] == "known-bug"
    # burn's sigmoid computes in float32: visible in float64 only.
    assert row(ops_rows, "activations", "sigmoid", "y", "burn", "f64")["verdict"] == "known-bug"
    assert row(ops_rows, "activations", "sigmoid", "y", "burn", "f32")["verdict"] == "pass"
    # candle's conv_transpose1d has no backward pass; its forward is right.
    r = row(ops_rows, "conv_transpose", "stride_gaps_1d", "a.grad", "candle", "f64")
    assert r["verdict"] == "known-bug" and "backward is not supported" in r["note"]
    assert row(ops_rows, "conv_transpose", "stride_gaps_1d", "y", "candle")["verdict"] == "pass"


def test_maximum_minimum_and_rms_norm(ops_rows):
    """Element-wise maximum/minimum at a tie: candle splits the gradient as PyTorch, burn
    gives it to the first operand; rms_norm: candle's slow one passes, its fused one has no
    backward, burn's takes its root in float32 (float64 off)."""
    for case in ("maximum_tie", "minimum_tie"):
        for dtype in ("f32", "f64"):
            assert (
                row(ops_rows, "elementwise", case, "a.grad", "candle", dtype)["verdict"] == "pass"
            )
            assert row(ops_rows, "elementwise", case, "a.grad", "burn", dtype)["verdict"] == (
                "known-bug"
            )
    for dtype in ("f32", "f64", "f16", "bf16"):
        assert row(ops_rows, "normalization", "rms_norm_slow", "x.grad", "candle", dtype)[
            "verdict"
        ] == ("pass")
        r = row(ops_rows, "normalization", "rms_norm_fused", "w.grad", "candle", dtype)
        assert r["verdict"] == "known-bug"
    assert row(ops_rows, "normalization", "rms_norm_slow", "y", "burn", "f32")["verdict"] == "pass"
    r = row(ops_rows, "normalization", "rms_norm_slow", "y", "burn", "f64")
    assert r["verdict"] == "known-bug"


def test_pooling_arguments_and_asymmetric_padding(ops_rows):
    """dilation, ceil_mode, count_include_pad and avg_pool1d: burn meets PyTorch's exact
    values; candle lacks them (1-D pooling, dilation, padding) and says so; the asymmetric
    padding (a pad step, then avg_pool2d with stride = kernel) runs in candle too."""
    cases = {
        "max_pool1d_dilated_ceil": "x1.grad",
        "max_pool2d_dilated": "x2.grad",
        "max_pool2d_ceil": "x2.grad",
        "avg_pool1d_ceil": "z1.grad",
        "avg_pool1d_ceil_exclude_pad": "z1.grad",
        "avg_pool2d_exclude_pad_ceil": "xe.grad",
        "avg_pool2d_asymmetric_padding": "xa.grad",
    }
    for case, grad in cases.items():
        for dtype in ("f32", "f64"):
            for q in ("y", grad):
                r = row(ops_rows, "pooling", case, q, "burn", dtype)
                assert (r["reference"], r["verdict"]) == ("exact", "pass"), (case, q, dtype)
    for dtype in ("f32", "f64", "f16", "bf16"):
        r = row(ops_rows, "pooling", "avg_pool2d_asymmetric_padding", "xa.grad", "candle", dtype)
        assert r["verdict"] == "pass", (dtype, r["note"])
    r = row(ops_rows, "pooling", "avg_pool1d_ceil", "y", "candle")
    assert r["verdict"] == "unsupported" and "no 1-D average pooling" in r["note"]
    r = row(ops_rows, "pooling", "max_pool2d_ceil", "y", "candle")
    assert r["verdict"] == "unsupported" and "no padding argument" in r["note"]


def test_transposed_convolutions_with_a_bias(ops_rows):
    """The bias gradient is exact where the backward runs (burn; candle's 2-D); candle's
    1-D transposed convolution has no backward, the bias's included (a known bug)."""
    for dtype in ("f32", "f64"):
        for case, q in (("bias_1d", "ba.grad"), ("bias_2d", "bp.grad")):
            r = row(ops_rows, "conv_transpose", case, q, "burn", dtype)
            assert (r["reference"], r["verdict"]) == ("exact", "pass")
        assert row(ops_rows, "conv_transpose", "bias_2d", "bp.grad", "candle", dtype)[
            "verdict"
        ] == ("pass")
        r = row(ops_rows, "conv_transpose", "bias_1d", "ba.grad", "candle", dtype)
        assert r["verdict"] == "known-bug"
        assert row(ops_rows, "conv_transpose", "bias_1d", "y", "candle", dtype)["verdict"] == (
            "pass"
        )


def test_indexing_writes(ops_rows):
    """scatter_add, scatter, index_add and index_put with both gradients: burn meets the
    exact values; candle's index_add does, its scatter and scatter_add backward rules are
    swapped (known bugs), it has no index_put that replaces rows, and neither Rust
    framework takes a scatter index narrower than x outside dim (api_limits)."""
    cases = {
        "scatter_add_dim0": "s23.grad",
        "scatter_add_dim1": "s42.grad",
        "scatter_add_full_index": "s43.grad",
        "scatter_dim0": "s23.grad",
        "scatter_dim1": "s42.grad",
        "index_add_dim0": "s33.grad",
        "index_add_dim1": "s43.grad",
        "index_put_rows": "s23.grad",
        "index_put_accumulate": "s33.grad",
    }
    for case, grad in cases.items():
        for dtype in ("f32", "f64"):
            for q in ("y", "x.grad", grad):
                r = row(ops_rows, "indexing_writes", case, q, "burn", dtype)
                assert (r["reference"], r["verdict"]) == ("exact", "pass"), (case, q, dtype)
    for dtype in ("f32", "f64"):
        for case in ("index_add_dim0", "index_add_dim1", "index_put_accumulate"):
            r = row(ops_rows, "indexing_writes", case, "x.grad", "candle", dtype)
            assert r["verdict"] == "pass", (case, dtype)
        for case in ("scatter_dim0", "scatter_add_full_index"):
            assert row(ops_rows, "indexing_writes", case, "x.grad", "candle", dtype)["verdict"] == (
                "known-bug"
            )
            assert row(ops_rows, "indexing_writes", case, "y", "candle", dtype)["verdict"] == (
                "pass"
            )
        r = row(ops_rows, "indexing_writes", "scatter_add_dim0", "s23.grad", "candle", dtype)
        assert r["verdict"] == "known-bug" and "shape mismatch in scatter" in r["note"]
    r = row(ops_rows, "indexing_writes", "index_put_rows", "y", "candle")
    assert r["verdict"] == "unsupported" and "index_put without accumulate" in r["note"]
    for fw in ("candle", "burn"):
        r = row(ops_rows, "indexing_writes", "scatter_add_smaller_index", "y", fw)
        assert r["verdict"] == "unsupported" and "shape in every dimension but dim" in r["note"]
    r = row(ops_rows, "indexing_writes", "scatter_add_smaller_index", "s22.grad", "torch")
    assert (r["reference"], r["verdict"]) == ("exact", "pass")


def test_a_documented_limit_is_unsupported_with_its_reason(ops_rows):
    """candle's max_pool2d backward with stride ≠ kernel (api_limits): unsupported, the note
    naming the reason and the source; accepted by check."""
    r = row(ops_rows, "pooling", "max_pool2d_pairs", "x2.grad", "candle")
    assert r["verdict"] == "unsupported"
    assert "backward only for stride = kernel" in r["note"] and "backprop.rs" in r["note"]


def test_half_precision_judges_exact_values_against_torch_in_that_dtype(ops_rows):
    """In float16 PyTorch's own row is the reference (its error from the exact values in the
    note) and candle passes by the float64-referenced rule; burn's ndarray backend has no
    half precision."""
    r = row(ops_rows, "half", "matmul", "y", "torch", "f16")
    assert r["verdict"] == "reference"
    assert r["note"].startswith("exact values taken as the float64 truth in f16")
    assert row(ops_rows, "half", "matmul", "y", "candle", "f16")["verdict"] == "pass"
    r = row(ops_rows, "half", "matmul", "y", "burn", "bf16")
    assert r["verdict"] == "unsupported" and "no bf16" in r["note"]
