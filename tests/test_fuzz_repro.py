"""The fuzzer's reproductions (parity.fuzz.repro, repro_burn) for every op of the probe
language, and its reporting per framework release (parity.fuzz.report): the probe file's
``versions``, known bugs matched with a finding's own release."""

from pathlib import Path

import numpy as np

from parity.fuzz import campaign, check, generate, report, repro, shrink
from parity.fuzz.generate import Case, Input, Route
from parity.fuzz.repro_burn import BURN_UNCOVERED, burn_source


def _finding(case, framework="candle", release="0.11.0", failures=()):
    return campaign.Finding(
        case.op, framework, "f32", check.FORWARD, case, list(failures), ["s"], release=release
    )


def test_every_op_has_a_reproduction_or_says_it_has_none():
    for name, case in generate.generate(4, generate.SUPPORTED_OPS, 2):
        for fw, write, uncovered in (
            ("candle", repro.candle_source, repro.CANDLE_UNCOVERED),
            ("burn", burn_source, BURN_UNCOVERED),
        ):
            text = write(_finding(case, fw), name)
            assert text.count("fn main") == 1 and "let y = " in text
            note = f"// NOTE: the {fw} call of {case.op} is {repro.UNCOVERED}"
            assert (note in text.splitlines()[1]) == (case.op in uncovered), (fw, case.op)
            assert (repro.UNCOVERED in text) == (case.op in uncovered)
    # What the uncovered ops are: ops the framework's API lacks (its x-support says so).
    assert {"max_pool1d", "avg_pool1d"} == repro.CANDLE_UNCOVERED
    assert {"nll", "contiguous"} == BURN_UNCOVERED


def _inp(shape, values, dtype="float", grad=True):
    return Input(tuple(shape), Route(), tuple(shape), tuple(float(v) for v in values), dtype, grad)


def test_reproductions_call_the_runners_api():
    ct = Case(
        "conv_transpose1d",
        {"stride": 2, "padding": 1, "dilation": 1, "groups": 1, "output_padding": 1},
        (_inp([1, 1, 2], [1, 2]), _inp([1, 1, 3], [1, 0, -1]), _inp([1], [3])),
        (1, 1, 4),
        (1.0, 1.0, 1.0, 1.0),
    )
    assert (
        "let y = candle_nn::ConvTranspose1d::new(in1.clone(), Some(in2.clone()), "
        "candle_nn::ConvTranspose1dConfig { padding: 1, output_padding: 1, stride: 2, "
        "dilation: 1, groups: 1 }).forward(&in0)?;" in repro.candle_source(_finding(ct), "c")
    )
    assert (
        "let y = burn::tensor::module::conv_transpose1d(in0, in1, Some(in2), "
        "burn::tensor::ops::ConvTransposeOptions::new([2], [1], [1], [1], 1));"
        in burn_source(_finding(ct, "burn"), "c")
    )
    g = Case(
        "gather",
        {"dim": -1},
        (_inp([2, 3], range(6)), _inp([1, 2], [2, 0], "int64", False)),
        (1, 2),
        (1.0, 2.0),
    )
    text = repro.candle_source(_finding(g), "g")
    assert "let x1 = Tensor::from_vec(vec![2i64, 0i64], (1, 2), &dev)?;" in text
    assert "let y = in0.gather(&in1, 1)?;" in text and "grads.get(x1" not in text
    text = burn_source(_finding(g, "burn"), "g")
    assert "Tensor::<2, Int>::from_data(TensorData::new(vec![2i64, 0i64], [1, 2]), &dev);" in text
    assert "let y = in0.gather(1, in1);" in text
    mx = Case("max", {"dim": [0, 2], "keepdim": False}, (_inp([2, 1, 2], range(4)),), (1,), (1.0,))
    assert "let y = in0.max_keepdim(0)?.max_keepdim(2)?.reshape((1,))?;" in repro.candle_source(
        _finding(mx), "m"
    )
    assert "let y = in0.max_dims(&vec![0usize, 2usize]).squeeze_dims::<1>(" in burn_source(
        _finding(mx, "burn"), "m"
    )


def _narrowed_kernel_conv2d() -> Case:
    """conv2d of x [1, 1, 2, 2] by a kernel [1, 1, 1, 1] narrowed from [1, 2, 1, 1] (the
    layout of probes/conv2d_kernel_offset.yaml, whose known bug names candle 0.11.0 only)."""
    w = shrink.restore(
        Route((("narrow", {"dim": 1, "start": 1, "length": 1}),)), np.ones((1, 1, 1, 1))
    )
    x = _inp([1, 1, 2, 2], [1, 2, 3, 4])
    return Case("conv2d", {"stride": 1}, (x, w), (1, 1, 2, 2), (1.0, 2.0, 3.0, 4.0))


def test_a_finding_is_matched_with_the_known_bugs_of_its_own_release():
    known = report.known_bug_cases("probes")
    case = _narrowed_kernel_conv2d()
    same, _ = report.classify(_finding(case, release="0.11.0"), known)
    assert "conv2d_kernel_offset:narrowed" in same
    same, related = report.classify(_finding(case, release="0.11.1"), known)
    assert "conv2d_kernel_offset:narrowed" not in same + related


def _fail(release, values):
    return check.Failure(
        "fail",
        framework="candle",
        dtype="f32",
        quantity="y",
        kind=check.FORWARD,
        values=tuple(values),
        reference=(1.0,) * 4,
        release=release,
    )


def test_the_probe_files_known_bug_names_the_releases_that_fail():
    case = _narrowed_kernel_conv2d()
    ran = {"candle": ["0.11.0", "0.11.1"]}
    only_old = _finding(case, failures=[_fail("0.11.0", [0, 0, 0, 0])])
    doc, head = report.probe_doc(only_old, "p", 3, ran)
    assert doc["cases"]["case"]["known_bug"] == {
        "candle": {"versions": ["0.11.0"], "cpu": {"y": [0, 0, 0, 0]}}
    }
    assert "# candle 0.11.0 f32 forward:" in head
    both = [_fail("0.11.0", [0, 0, 0, 0]), _fail("0.11.1", [0, 0, 0, 0])]
    doc, _ = report.probe_doc(_finding(case, failures=both), "p", 3, ran)
    assert doc["cases"]["case"]["known_bug"] == {"candle": {"cpu": {"y": [0, 0, 0, 0]}}}
    # Different values per release: the finding's own release's, for that release only.
    other = [_fail("0.11.0", [0, 0, 0, 0]), _fail("0.11.1", [5, 5, 5, 5])]
    doc, _ = report.probe_doc(_finding(case, release="0.11.1", failures=other), "p", 3, ran)
    assert doc["cases"]["case"]["known_bug"] == {
        "candle": {"versions": ["0.11.1"], "cpu": {"y": [5, 5, 5, 5]}}
    }


def test_a_written_probe_with_versions_loads(tmp_path):
    from parity.fuzz import job

    case = _narrowed_kernel_conv2d()
    f = _finding(case, failures=[_fail("0.11.0", [0, 0, 0, 0])])
    result = campaign.Campaign([f], {}, 1, 1, {"total": 1.0})
    settings = {"frameworks": ["candle"], "releases": {"candle": ["0.11.0", "0.11.1"]}}
    (row,) = job.write_findings(
        result, 3, Path("probes"), tmp_path / "f.csv", tmp_path / "f.md",
        tmp_path / "probes", tmp_path / "repro", settings,
    )  # fmt: skip
    from parity.probe import loader

    c = loader.load(row["probe"]).case("case")
    assert c["known_bug_versions"] == {"candle": ["0.11.0"]}
    assert (row["release"], row["known_bug"]) == ("0.11.0", "conv2d_kernel_offset:narrowed")
