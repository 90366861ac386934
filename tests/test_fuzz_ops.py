"""The fuzzer's generators over the whole probe language (parity.fuzz.generators): one per
op, seeded so that the first fuzzer's cases stay as they were, integer index inputs valid
and drawn from PyTorch's whole domain, arguments reaching their limits, values chosen per
op, and shrinking that keeps indices valid."""

import hashlib

import numpy as np
import pytest

from parity.fuzz import check, generate, shrink
from parity.fuzz.generators import table as generator_table
from parity.fuzz.generators.index import INDEX, UNIQUE_INDEX, index_bound, repeats_a_write
from parity.probe import ops as probe_ops
from parity.probe.shapes import table as probe_shapes
from parity.probe.shapes.common import INT64


def test_every_op_of_the_language_has_a_generator_and_a_stream():
    """The next op added to schemas/probe.schema.yaml fails here until it has a generator
    and a place at the end of SEED_ORDER."""
    assert set(generator_table.GENERATORS) == set(probe_ops.op_names())
    assert sorted(generator_table.SEED_ORDER) == sorted(generator_table.GENERATORS)
    assert len(set(generator_table.SEED_ORDER)) == len(generator_table.SEED_ORDER)
    # The first fuzzer seeded its 27 ops by their sorted order; they keep their streams.
    assert generator_table.SEED_ORDER[:27] == generator_table.FIRST_OPS
    assert list(generator_table.FIRST_OPS) == sorted(generator_table.FIRST_OPS)
    assert len(generator_table.FIRST_OPS) == 27
    assert tuple(sorted(probe_ops.op_names())) == generate.SUPPORTED_OPS


#: sha256 (first 16 hex digits) of the first fuzzer's probe documents, seed 21, 5 cases,
#: computed with the fuzzer before the generators were extended (commit 7d928fe). (A case
#: with a scalar output now has the loss sum(y) instead of weighted_sum(y, w); its draws
#: are the same.)
FIRST_DIGESTS = {
    "abs": "557cba2a3fd3f70e",
    "div": "44d9346507af6120",
    "linear": "cdd2d3659ed4204f",
    "matmul": "c8cddf2ed3361811",
    "softmax": "d50fd37753ace91a",
    "upsample_nearest2d": "6567a6bb619c0dd0",
}


@pytest.mark.parametrize("op", sorted(FIRST_DIGESTS))
def test_an_unchanged_generator_gives_the_first_fuzzers_cases_byte_for_byte(op):
    text = "".join(generate.dump(generate.to_doc(c)) for _, c in generate.generate(21, [op], 5))
    assert hashlib.sha256(text.encode()).hexdigest()[:16] == FIRST_DIGESTS[op]


def _cases(ops, n=40, seed=5):
    return [c for _, c in generate.generate(seed, ops, n)]


def test_index_inputs_are_valid_int64_from_pytorchs_whole_domain():
    smaller = longer = repeated = False
    for case in _cases(sorted(INDEX)):
        shapes = [list(i.shape) for i in case.inputs]
        ints = probe_shapes.INTEGER_INPUTS.get(case.op, ())
        for i, inp in enumerate(case.inputs):
            assert (inp.dtype == INT64) == (i in ints)
            if i not in ints:
                continue
            assert not inp.grad
            idx = inp.logical()
            assert np.array_equal(idx, np.round(idx))
            assert idx.min() >= 0 and idx.max() < index_bound(case.op, case.args, shapes)
            if case.op in UNIQUE_INDEX:
                assert inp.route.steps == () and not repeats_a_write(case.op, case.args, idx)
            repeated |= len(np.unique(idx)) < idx.size
        if case.op == "gather":
            x, idx = shapes
            k = case.args["dim"] % len(x)
            smaller |= any(m < n for j, (n, m) in enumerate(zip(x, idx, strict=False)) if j != k)
            longer |= idx[k] > x[k]
        if case.op == "bce_with_logits":
            assert set(case.inputs[1].logical().reshape(-1)) <= {0.0, 1.0}
            assert not case.inputs[1].grad
    assert smaller and longer and repeated


def test_spatial_arguments_reach_their_limits():
    seen = set()
    for case in _cases(["conv_transpose1d", "conv_transpose2d"], 60):
        a = case.args
        for i in range(2 if case.op.endswith("2d") else 1):
            s, d, o = (a[k][i] if isinstance(a[k], list) else a[k] for k in
                       ("stride", "dilation", "output_padding"))  # fmt: skip
            assert 0 <= o < max(s, d)
            if o == max(s, d) - 1 > 0:
                seen.add("output_padding at its limit")
            if d == 3:
                seen.add("dilation 3")
        if len(case.inputs) == 3:
            seen.add("bias")
    for case in _cases(["max_pool1d", "max_pool2d", "avg_pool1d", "avg_pool2d"], 60):
        seen.add(f"ceil_mode {case.args['ceil_mode']}")
        if case.args.get("dilation") == 3:
            seen.add("pool dilation 3")
        if case.args.get("count_include_pad") is False:
            seen.add("count_include_pad false")
    for case in _cases(["pad"]):
        if any(b != e for b, e in case.args["padding"]):
            seen.add("asymmetric pad")
    assert seen == {
        "output_padding at its limit",
        "dilation 3",
        "bias",
        "ceil_mode True",
        "ceil_mode False",
        "pool dilation 3",
        "count_include_pad false",
        "asymmetric pad",
    }


def test_values_suit_each_op():
    for case in _cases(["log", "sqrt", "maximum", "minimum", "sort", "argmax", "rms_norm"], 20):
        x = case.inputs[0].logical()
        if case.op == "log":
            assert x.min() > 0 and np.array_equal(np.log2(x), np.round(np.log2(x)))
        elif case.op == "sqrt":
            assert x.min() > 0 and np.array_equal(np.sqrt(x) * 2, np.round(np.sqrt(x) * 2))
        elif case.op in ("maximum", "minimum"):
            assert not np.any(x == case.inputs[1].logical())
        elif case.op in ("sort", "argmax"):
            assert not generate.degenerate(case.op, case.inputs, case.args)
            s = np.sort(np.moveaxis(x, case.args["dim"] % x.ndim, -1), axis=-1)
            assert np.all(s[..., 1:] > s[..., :-1])
        else:
            assert not np.any(np.all(x == 0, axis=-1))


def test_an_op_with_an_int64_output_compares_y_only():
    (case,) = _cases(["argsort"], 1)
    doc = generate.to_doc(case)
    assert "loss" not in doc["cases"]["case"] and "w" not in doc["inputs"]
    assert doc["cases"]["case"]["compare"] == ["y"] and case.weights == ()
    generate.to_probe("a", case)


def _always_fails(named):
    for n, c in named:
        generate.to_probe(n, c)  # every candidate is a valid probe (indices in range)
    fail = check.Failure("fail", framework="candle", dtype="f32", quantity="y", kind=check.FORWARD)
    return {n: [fail] for n, _ in named}


@pytest.mark.parametrize("op", ["gather", "scatter", "index_put", "embedding", "pad"])
def test_shrinking_keeps_indices_valid_down_to_the_smallest_case(op):
    case = next(c for c in _cases([op], 20) if sum(np.prod(i.shape) for i in c.inputs) > 12)
    small, ran = shrink.shrink("s", case, ("candle", "", "f32", check.FORWARD), _always_fails)
    assert ran > 0 and shrink.size(small) < shrink.size(case)
    assert all(i.route.steps == () for i in small.inputs)
    assert [i.dtype for i in small.inputs] == [i.dtype for i in case.inputs]
    if op == "pad":
        assert small.args["padding"] == [[0, 0]]
        assert all(n == 1 for n in small.inputs[0].shape)
    else:
        # Every dimension down to 1; the index 0 (the only valid one).
        assert all(n == 1 for i in small.inputs for n in i.shape)
        ints = probe_shapes.INTEGER_INPUTS[op]
        assert [small.inputs[i].stored for i in ints] == [(0.0,)] * len(ints)


def test_no_pooling_window_holds_only_padding():
    """PyTorch 2.15's max_pool1d corrupts the heap on a window of padding only (this case
    aborted the fuzz job: "free(): invalid next size"); the generator makes none."""
    crash = {"kernel": 2, "stride": 2, "padding": 1, "ceil_mode": True, "dilation": 2}
    assert generate.empty_window("max_pool1d", crash, (1, 3, 1))
    assert not generate.empty_window("max_pool1d", {**crash, "dilation": 1}, (1, 3, 1))
    assert generate.degenerate("max_pool1d", [_inp_of((1, 3, 1))], crash)
    pools = ["max_pool1d", "max_pool2d", "avg_pool1d", "avg_pool2d"]
    for case in _cases(pools, 40, 21):
        assert not generate.empty_window(case.op, case.args, case.inputs[0].shape)


def _inp_of(shape):
    n = int(np.prod(shape))
    return generate.Input(tuple(shape), generate.Route(), tuple(shape), (0.0,) * n)
