"""Shape and kind inference of the probe ops (parity.probe.shapes), against hand-checked
sizes from PyTorch's formulas; no framework needed."""

import pytest

from parity.probe.ops import op_args, op_names, op_support
from parity.probe.shapes import common
from parity.probe.shapes import table as ps

F, INT = common.FLOAT, common.INT64


def run(op, shapes, kinds=None, values=None, **given):
    """The (shape, kind) of ``op`` with arguments written as in a probe file."""
    kinds = kinds or [F] * len(shapes)
    return ps.infer(op, op_args(op, given), shapes, kinds, values)


def test_every_schema_op_has_an_inference_and_a_support_entry():
    assert set(ps.OPS) == set(op_names())
    for op in op_names():
        support = op_support(op)
        assert set(support) == {"torch", "candle", "burn"}, op
        assert all(isinstance(v, str) and v for v in support.values()), op


# (op, input shapes, arguments as written, expected output shape), each size by hand.
CASES = [
    ("transpose", [[2, 3, 4]], {"dim0": 0, "dim1": -1}, [4, 3, 2]),
    ("narrow", [[5, 3]], {"dim": 0, "start": 1, "length": 4}, [4, 3]),
    ("broadcast_to", [[1, 3]], {"shape": [2, 4, 3]}, [2, 4, 3]),
    ("unsqueeze", [[2, 3]], {"dim": -1}, [2, 3, 1]),
    ("unsqueeze", [[2, 3]], {"dim": 0}, [1, 2, 3]),
    ("squeeze", [[2, 1, 3]], {"dim": 1}, [2, 3]),
    ("squeeze", [[2, 4, 3]], {"dim": 1}, [2, 4, 3]),  # PyTorch keeps a dim of size ≠ 1
    ("reshape", [[2, 3, 4]], {"shape": [6, 4]}, [6, 4]),
    ("contiguous", [[2, 3]], {}, [2, 3]),
    # l_out = (8 + 2·1 − 2·(3 − 1) − 1) // 2 + 1 = 5 // 2 + 1 = 3
    ("conv1d", [[2, 4, 8], [6, 2, 3]], {"padding": 1, "stride": 2, "dilation": 2, "groups": 2},
     [2, 6, 3]),
    # h: (5 + 0 − 2 − 1) // 1 + 1 = 3; w: (6 + 2 − 2 − 1) // 2 + 1 = 3
    ("conv2d", [[1, 2, 5, 6], [3, 2, 3, 3]], {"padding": [0, 1], "stride": [1, 2]}, [1, 3, 3, 3]),
    ("conv2d", [[1, 1, 4, 4], [2, 1, 2, 2]], {}, [1, 2, 3, 3]),
    # (4 − 1)·2 − 2·1 + 1·(3 − 1) + 1 + 1 = 8; c_out = 3·2
    ("conv_transpose1d", [[2, 4, 4], [4, 3, 3]],
     {"stride": 2, "padding": 1, "output_padding": 1, "groups": 2}, [2, 6, 8]),
    # h: (3 − 1)·1 + (2 − 1) + 1 = 4; w: (3 − 1)·2 + 2·(2 − 1) + 1 = 7
    ("conv_transpose2d", [[1, 2, 3, 3], [2, 5, 2, 2]], {"stride": [1, 2], "dilation": [1, 2]},
     [1, 5, 4, 7]),
    # a bias [c_out] as the third input
    ("conv_transpose1d", [[2, 4, 4], [4, 3, 3], [6]], {"groups": 2}, [2, 6, 6]),
    # stride = kernel: (7 − 2) // 2 + 1 = 3; with padding 1: (7 + 2 − 3) // 3 + 1 = 3
    ("max_pool1d", [[1, 2, 7]], {"kernel": 2}, [1, 2, 3]),
    ("max_pool1d", [[1, 2, 7]], {"kernel": 3, "padding": 1}, [1, 2, 3]),
    ("max_pool2d", [[1, 1, 4, 6]], {"kernel": 2}, [1, 1, 2, 3]),
    # dilation 2 (span 5), stride 3, padding 1: (7 + 2 − 5) // 3 + 1 = 2; ceil_mode rounds
    # up to 3 (the third window starts at 6 < 7 + 1, inside the input)
    ("max_pool1d", [[1, 2, 7]], {"kernel": 3, "stride": 3, "padding": 1, "dilation": 2}, [1, 2, 2]),
    ("max_pool1d", [[1, 2, 7]],
     {"kernel": 3, "stride": 3, "padding": 1, "dilation": 2, "ceil_mode": True}, [1, 2, 3]),
    # ceil_mode with a window that would start in the right padding: dropped (PyTorch), so
    # kernel 2, stride 2, padding 1 over 5 gives 3 in both modes
    ("max_pool1d", [[1, 1, 5]], {"kernel": 2, "padding": 1, "ceil_mode": True}, [1, 1, 3]),
    ("max_pool2d", [[1, 1, 4, 5]], {"kernel": 2, "stride": 1, "dilation": [2, 1]}, [1, 1, 2, 4]),
    ("avg_pool1d", [[1, 1, 6]], {"kernel": 3, "stride": 2, "padding": 1}, [1, 1, 3]),
    ("avg_pool1d", [[1, 1, 6]], {"kernel": 3, "stride": 2, "padding": 1, "ceil_mode": True},
     [1, 1, 4]),
    ("pad", [[1, 2, 4, 4]], {"padding": [[1, 3]]}, [1, 2, 4, 8]),
    ("pad", [[2, 3]], {"padding": [[0, 1], [2, 0]]}, [3, 5]),
    # h: (5 + 2 − 3) // 1 + 1 = 5; w: (6 + 0 − 2) // 2 + 1 = 3
    ("avg_pool2d", [[2, 3, 5, 6]], {"kernel": [3, 2], "stride": [1, 2], "padding": [1, 0]},
     [2, 3, 5, 3]),
    ("linear", [[2, 3, 4], [5, 4]], {}, [2, 3, 5]),
    ("linear", [[4], [5, 4], [5]], {}, [5]),
    ("matmul", [[3, 2, 4], [3, 4, 5]], {}, [3, 2, 5]),
    ("layer_norm", [[2, 4], [4], [4]], {}, [2, 4]),
    ("softmax", [[2, 4]], {"dim": 0, "candle": "slow"}, [2, 4]),
    ("log_softmax", [[2, 4]], {}, [2, 4]),
    ("upsample_nearest1d", [[1, 2, 3]], {"size": 6}, [1, 2, 6]),
    ("upsample_nearest2d", [[1, 2, 3, 3]], {"size": [4, 5]}, [1, 2, 4, 5]),
    *[(op, [[2, 3]], {}, [2, 3]) for op in
      ("relu", "abs", "sigmoid", "tanh", "silu", "gelu", "elu", "exp", "log", "sqrt")],
    *[(op, [[2, 3], [2, 3]], {}, [2, 3]) for op in ("add", "sub", "mul", "div")],
    ("sum", [[2, 3, 4]], {}, []),
    ("sum", [[2, 3, 4]], {"dim": 1}, [2, 4]),
    ("mean", [[2, 3, 4]], {"dim": [0, -1], "keepdim": True}, [1, 3, 1]),
    ("max", [[2, 3, 4]], {"dim": [2, 0]}, [3]),
    ("min", [[2, 3]], {"keepdim": True}, [1, 1]),
    ("argmax", [[2, 3, 4]], {"dim": 1}, [2, 4]),
    ("argmin", [[2, 3, 4]], {"dim": -1, "keepdim": True}, [2, 3, 1]),
    ("sort", [[2, 3]], {}, [2, 3]),
    ("argsort", [[2, 3]], {"dim": 0, "descending": True}, [2, 3]),
    ("bce_with_logits", [[4], [4]], {}, []),
    ("mse", [[2, 3], [2, 3]], {}, []),
    ("mse", [[2, 3], [2, 3]], {"reduction": "none"}, [2, 3]),
]  # fmt: skip


@pytest.mark.parametrize(("op", "shapes", "given", "want"), CASES)
def test_output_shapes(op, shapes, given, want):
    shape, kind = run(op, shapes, **given)
    assert shape == want
    assert kind == (INT if op in ("argmax", "argmin", "argsort") else F)


def test_index_ops_take_int64_indices():
    assert run("embedding", [[2, 3], [10, 4]], [INT, F]) == ([2, 3, 4], F)
    assert run("index_select", [[5, 3], [2]], [F, INT], dim=0) == ([2, 3], F)
    assert run("index_select", [[5, 3], [4]], [F, INT], dim=-1) == ([5, 4], F)
    assert run("gather", [[3, 4], [2, 4]], [F, INT], dim=0) == ([2, 4], F)
    assert run("gather", [[3, 4], [3, 6]], [F, INT], dim=1) == ([3, 6], F)
    assert run("cross_entropy", [[4, 3], [4]], [F, INT]) == ([], F)
    assert run("cross_entropy", [[4, 3], [4]], [F, INT], reduction="none") == ([4], F)
    assert run("nll", [[4, 3], [4]], [F, INT], reduction="sum") == ([], F)
    # Layout changes keep the kind; an index computed by argsort feeds gather.
    assert run("transpose", [[2, 3]], [INT], dim0=0, dim1=1) == ([3, 2], INT)
    assert run("gather", [[2, 3], [2, 3]], [F, INT], dim=1) == ([2, 3], F)


def test_indexing_writes_keep_the_target_shape():
    assert run("scatter_add", [[4, 3], [2, 3], [2, 3]], [F, INT, F], dim=0) == ([4, 3], F)
    assert run("scatter", [[4, 3], [4, 2], [4, 2]], [F, INT, F], dim=-1) == ([4, 3], F)
    assert run("scatter_add", [[4, 3], [2, 2], [2, 2]], [F, INT, F], dim=0) == ([4, 3], F)
    assert run("index_add", [[4, 3], [5], [4, 5]], [F, INT, F], dim=1) == ([4, 3], F)
    assert run("index_put", [[4, 3], [2], [2, 3]], [F, INT, F]) == ([4, 3], F)
    got = run("index_put", [[4, 3], [2], [2, 3]], [F, INT, F], [None, [3.0, 0.0], None])
    assert got == ([4, 3], F)
    with pytest.raises(common.ShapeError, match="index 4 is out of range"):
        run("index_put", [[4, 3], [2], [2, 3]], [F, INT, F], [None, [4.0, 0.0], None])
    with pytest.raises(common.ShapeError, match="index 3 is out of range"):
        run("scatter", [[4, 3], [1, 3], [1, 3]], [F, INT, F], [None, [0, 1, 3], None], dim=1)


@pytest.mark.parametrize(
    ("op", "shapes", "kinds", "given", "words"),
    [
        ("transpose", [[2, 3]], None, {"dim0": 0, "dim1": 2}, "dim1 2 is out of range"),
        ("narrow", [[5]], None, {"dim": 0, "start": 3, "length": 3}, "exceeds the size 5"),
        ("broadcast_to", [[2, 3]], None, {"shape": [4, 3, 3]}, "only size 1 expands"),
        ("broadcast_to", [[2, 3]], None, {"shape": [3]}, "shorter shape"),
        ("unsqueeze", [[2, 3]], None, {"dim": 3}, "out of range"),
        ("reshape", [[2, 3]], None, {"shape": [4, 2]}, "(6 elements) to [4, 2] (8 elements)"),
        ("conv1d", [[1, 3, 8], [2, 2, 3]], None, {}, "the input has 3"),
        ("conv1d", [[1, 4, 8], [3, 2, 3]], None, {"groups": 2}, "must divide"),
        ("conv1d", [[1, 1, 2], [1, 1, 3]], None, {}, "smaller than the dilated kernel (3)"),
        ("conv1d", [[1, 8], [1, 1, 3]], None, {}, "rank 3"),
        ("conv2d", [[1, 1, 4, 4], [1, 1, 2, 5]], None, {}, "along w"),
        ("conv_transpose1d", [[1, 2, 4], [3, 1, 3]], None, {}, "must equal the input channels"),
        ("conv_transpose2d", [[1, 2, 3, 3], [2, 5, 2, 2], [2]], None, {},
         "bias must have shape [5], got [2]"),
        ("conv1d", [[1, 1, 4], [1, 1, 2], [1]], None, {}, "takes 2 inputs, 3 given"),
        ("conv_transpose1d", [[1, 2, 4], [2, 1, 3]], None, {"stride": 2, "output_padding": 2},
         "smaller than the stride"),
        ("max_pool1d", [[1, 1, 4]], None, {"kernel": 2, "padding": 2}, "at most half"),
        ("max_pool2d", [[1, 1, 1, 4]], None, {"kernel": 2}, "smaller than the kernel"),
        ("max_pool1d", [[1, 1, 4]], None, {"kernel": 3, "dilation": 2},
         "smaller than the dilated kernel (5)"),
        ("avg_pool1d", [[1, 1, 4]], None, {"kernel": 2, "padding": 2}, "at most half"),
        ("pad", [[2, 3]], None, {"padding": [[0, 1], [0, 1], [1, 0]]}, "3 [before, after] pairs"),
        ("linear", [[2, 3], [4, 5]], None, {}, "takes 5 features"),
        ("linear", [[2, 3], [4, 3], [5]], None, {}, "4 elements"),
        ("matmul", [[2, 3, 4], [1, 4, 5]], None, {}, "no implicit broadcasting"),
        ("matmul", [[3, 4], [5, 2]], None, {}, "4 ≠ 5"),
        ("matmul", [[4], [4, 2]], None, {}, "rank 2 or more"),
        ("layer_norm", [[2, 4], [3], [4]], None, {}, "weight must have shape [4]"),
        ("softmax", [[2, 4]], None, {"dim": 2, "candle": "slow"}, "out of range"),
        ("upsample_nearest2d", [[1, 2, 3]], None, {"size": [2, 2]}, "rank 4"),
        ("add", [[2, 3], [1, 3]], None, {}, "equal shapes"),
        ("sum", [[2, 3]], None, {"dim": [0, -2]}, "dim 0 appears more than once"),
        ("mean", [[2, 3]], None, {"dim": 2}, "dim 2 is out of range"),
        ("max", [[2, 0]], None, {"dim": 1}, "empty dimension"),
        ("argmax", [[2, 3]], None, {"dim": -3}, "out of range"),
        ("embedding", [[2], [10]], [INT, F], {}, "rank 2"),
        ("index_select", [[5, 3], [2, 1]], [F, INT], {"dim": 0}, "rank 1"),
        ("gather", [[3, 4], [2, 5]], [F, INT], {"dim": 0}, "larger than x"),
        ("gather", [[3, 4], [2]], [F, INT], {"dim": 0}, "x's rank"),
        ("scatter_add", [[4, 3], [2, 3], [2, 2]], [F, INT, F], {"dim": 0}, "src's shape [2, 2]"),
        ("scatter", [[4, 3], [2, 4], [2, 4]], [F, INT, F], {"dim": 0}, "larger than x"),
        ("scatter", [[4, 3], [2], [2]], [F, INT, F], {"dim": 0}, "x's rank"),
        ("index_add", [[4, 3], [2], [4, 2]], [F, INT, F], {"dim": 0}, "shape [2, 3]"),
        ("index_put", [[4, 3], [2], [2, 4]], [F, INT, F], {}, "shape [2, 3], got [2, 4]"),
        ("index_put", [[4, 3], [2], [2, 3]], [F, F, F], {}, "must be int64, got float"),
        ("cross_entropy", [[4, 3], [3]], [F, INT], {}, "targets must have shape [4]"),
        ("mse", [[2, 3], [3, 2]], None, {}, "equal shapes"),
        ("relu", [[2]], [INT], {}, "must be float, got int64"),
        ("embedding", [[2], [4, 3]], [F, F], {}, "must be int64, got float"),
        ("add", [[2], [2], [2]], None, {}, "takes 2 inputs, 3 given"),
    ],
)  # fmt: skip
def test_shape_errors(op, shapes, kinds, given, words):
    with pytest.raises(common.ShapeError) as e:
        run(op, shapes, kinds, **given)
    assert words in str(e.value)


def test_index_values_are_range_checked_when_known():
    with pytest.raises(common.ShapeError, match=r"index 4 is out of range: expected 0 … 3"):
        run("embedding", [[2], [4, 3]], [INT, F], [[0.0, 4.0], None])
    with pytest.raises(common.ShapeError, match="target -1"):
        run("nll", [[2, 3], [2]], [F, INT], [None, [0.0, -1.0]])
    assert run("gather", [[2, 3], [2, 1]], [F, INT], [None, [2.0, 0.0]], dim=1)[0] == [2, 1]


def test_unknown_op():
    with pytest.raises(common.ShapeError, match="unknown op 'conv3d'"):
        ps.infer("conv3d", {}, [[1]])


def _inputs(**shapes):
    return [
        {"name": n, "shape": s, "dtype": F, "requires_grad": True, "values": None}
        for n, s in shapes.items()
    ]


def test_quantities_and_stacking_over_optimizer_steps():
    case = {
        "steps": [
            {"out": "y", "inputs": ["x", "w"], "op": {"name": "matmul"}},
            {"out": "i", "inputs": ["y"], "op": {"name": "argmax", "dim": 1, "keepdim": False}},
        ],
        "loss": [{"kind": "sum", "input": "y"}],
        "optimizer_steps": 1,
        "compare": ["loss", "y", "i", "w.grad", "w.after_step", "w.exp_avg"],
    }
    inputs = _inputs(x=[2, 3], w=[3, 4])
    assert ps.infer_case(inputs, case) == {
        "loss": ([], F),
        "y": ([2, 4], F),
        "i": ([2], INT),
        "w.grad": ([3, 4], F),
        "w.after_step": ([3, 4], F),
        "w.exp_avg": ([3, 4], F),
    }
    got = ps.infer_case(inputs, {**case, "optimizer_steps": 3})
    assert got["loss"] == ([3], F) and got["w.grad"] == ([3, 3, 4], F) and got["i"] == ([3, 2], INT)


def test_case_errors_name_the_step_or_the_loss_term():
    case = {
        "steps": [
            {"out": "t", "inputs": ["x"], "op": {"name": "transpose", "dim0": 0, "dim1": 1}},
            {"out": "y", "inputs": ["t", "x"], "op": {"name": "add"}},
        ],
        "compare": ["y"],
    }
    with pytest.raises(common.CaseShapeError) as e:
        ps.infer_case(_inputs(x=[2, 3]), case)
    assert e.value.field == "steps[1].add"
    assert "input shapes [3, 2], [2, 3]" in e.value.problem
    case = {"steps": [], "loss": [{"kind": "weighted_sum", "input": "x", "weights": "w"}],
            "compare": ["loss"]}  # fmt: skip
    with pytest.raises(common.CaseShapeError) as e:
        ps.infer_case(_inputs(x=[2, 3], w=[3, 2]), case)
    assert e.value.field == "loss[0].weighted_sum"


def test_scratch_of_convolutions():
    # conv1d [2, 1, 8] by [4, 1, 3]: l_out 6, im2col 2 · 6 · (1 · 3)
    assert ps.scratch_elements("conv1d", op_args("conv1d", {}), [[2, 1, 8], [4, 1, 3]]) == 36
    assert ps.scratch_elements("relu", {}, [[2]]) == 0
