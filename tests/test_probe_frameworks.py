"""The probes on the real frameworks: PyTorch in-process, candle and burn through their real
binaries.

The study's probes are integer-valued, so every value is compared for equality.
"""

import logging

import pytest
import yaml

from parity.compare import verdicts
from parity.probe import rust as rust_probe
from parity.probe import torch as probe_torch
from parity.probe.judge import judge_probe_row
from parity.probe.loader import load
from parity.probe.ops import op_names
from parity.probe.plan import ProbeKey
from parity.probe.results import read_results

from conftest import REPO

#: The op probes: every op of probe language v2 against hand-computed exact values.
OPS = REPO / "tests/probes/ops"

LOG = logging.getLogger("test")
DTYPES = ("f32", "f64")

# The study's conv1d values (docs/study.md).
RIGHT_1D = [340, 392, 444, 484, 568, 652]
CANDLE_CPU_1D = [220, 256, 292, 508, 608, 708]
BATCH1_1D = [20, 30, 40, 44, 70, 96]
RIGHT_2D = [4728, 4980, 5736, 5988, 6834, 7248, 8490, 8904]


def run_rust(framework, binary, probe, dtype, tmp_path):
    """Outcomes of ``probe`` from a Rust runner, by (case, quantity), via its result file."""
    key = ProbeKey(probe.name, framework, dtype, "cpu")
    out = tmp_path / f"{framework}-{probe.name}-{dtype}.parquet"
    rust_probe.probe(probe, key, binary, str(out), 1, LOG, None)
    return read_results(out, probe, key)[1]


def run_candle(binary, probe, dtype, tmp_path):
    return run_rust("candle", binary, probe, dtype, tmp_path)


def run_burn(binary, probe, dtype, tmp_path):
    return run_rust("burn", binary, probe, dtype, tmp_path)


def run_torch(probe, dtype):
    return {(o.case, o.quantity): o for o in probe_torch.run(probe, dtype, "cpu", 1, LOG)}


def values(outcomes, case, q):
    o = outcomes[(case, q)]
    assert o.status == "ok", o
    return o.values.tolist()


@pytest.mark.parametrize("dtype", DTYPES)
def test_torch_study_probes_exact(dtype):
    r = run_torch(load(REPO / "probes/conv1d_grad.yaml"), dtype)
    assert values(r, "batch2", "loss") == [-84]
    assert values(r, "batch2", "w.grad") == RIGHT_1D
    assert values(r, "batch1", "w.grad") == BATCH1_1D
    r = run_torch(load(REPO / "probes/conv1d_contiguity.yaml"), dtype)
    for case in ("both_strided", "input_contiguous", "kernel_contiguous", "both_contiguous"):
        assert values(r, case, "y") == RIGHT_1D, case
    r = run_torch(load(REPO / "probes/conv2d_grad.yaml"), dtype)
    assert values(r, "batch2", "w.grad") == RIGHT_2D


@pytest.mark.parametrize("dtype", DTYPES)
def test_candle_study_probes_exact(candle_binary, dtype, tmp_path):
    r = run_candle(candle_binary, load(REPO / "probes/conv1d_grad.yaml"), dtype, tmp_path)
    assert values(r, "batch2", "loss") == [-84]
    assert values(r, "batch2", "w.grad") == CANDLE_CPU_1D  # the known bug
    assert values(r, "batch1", "w.grad") == BATCH1_1D
    r = run_candle(candle_binary, load(REPO / "probes/conv1d_contiguity.yaml"), dtype, tmp_path)
    # The kernel c.transpose(0, 1) is strided unless made contiguous.
    assert values(r, "both_strided", "y") == CANDLE_CPU_1D
    assert values(r, "input_contiguous", "y") == CANDLE_CPU_1D
    assert values(r, "kernel_contiguous", "y") == RIGHT_1D
    assert values(r, "both_contiguous", "y") == RIGHT_1D
    r = run_candle(candle_binary, load(REPO / "probes/conv2d_grad.yaml"), dtype, tmp_path)
    assert values(r, "batch2", "w.grad") == RIGHT_2D


@pytest.mark.parametrize("dtype", DTYPES)
def test_burn_study_probes_exact(burn_binary, dtype, tmp_path):
    r = run_burn(burn_binary, load(REPO / "probes/conv1d_grad.yaml"), dtype, tmp_path)
    assert values(r, "batch2", "loss") == [-84]
    assert values(r, "batch2", "w.grad") == RIGHT_1D
    assert r[("batch2", "w.grad")].shape == (2, 1, 3)
    assert values(r, "batch1", "w.grad") == BATCH1_1D
    r = run_burn(burn_binary, load(REPO / "probes/conv2d_grad.yaml"), dtype, tmp_path)
    assert values(r, "batch2", "w.grad") == RIGHT_2D
    assert r[("batch2", "w.grad")].shape == (2, 1, 2, 2)
    # burn's tensor API has no contiguous copy: only the all-strided case runs.
    probe = load(REPO / "probes/conv1d_contiguity.yaml")
    r = run_burn(burn_binary, probe, dtype, tmp_path)
    assert values(r, "both_strided", "y") == RIGHT_1D
    for case in ("input_contiguous", "kernel_contiguous", "both_contiguous"):
        assert r[(case, "y")].status == verdicts.UNSUPPORTED, case


def test_burn_unsupported_ops_are_rows_not_errors(burn_binary, tmp_path):
    path = tmp_path / "copies.yaml"
    path.write_text(
        """
description: An op burn's API lacks (contiguous) beside one it has.
inputs:
  x: {values: [[1, -2, 3], [-4, 5, -6]], requires_grad: true}
cases:
  copy:
    steps:
      - transpose: {in: x, dim0: 0, dim1: 1, out: t}
      - contiguous: {in: t, out: c}
      - relu: {in: c, out: r}
    loss: {sum: r}
    compare: [r, x.grad]
  view:
    steps:
      - transpose: {in: x, dim0: 0, dim1: 1, out: t}
      - relu: {in: t, out: r}
    loss: {sum: r}
    compare: [r, x.grad]
    exact: {r: [1, 0, 0, 5, 3, 0], x.grad: [[1, 0, 1], [0, 1, 0]]}
"""
    )
    probe = load(path)
    outcomes = run_burn(burn_binary, probe, "f32", tmp_path)
    assert list(outcomes) == probe.quantities()
    key = ProbeKey(probe.name, "burn", "f32", "cpu")
    for q in ("r", "x.grad"):
        o = outcomes[("copy", q)]
        assert (o.status, o.values) == (verdicts.UNSUPPORTED, None)
        assert "contiguous" in o.message
        j = judge_probe_row(probe, key, o, None)
        assert j.verdict == verdicts.UNSUPPORTED and verdicts.meets_expectation(j.verdict)
        assert j.message.startswith("not supported by burn: contiguous")
        j = judge_probe_row(probe, key, outcomes[("view", q)], None)
        assert (j.verdict, j.worst) == (verdicts.PASS, 0.0)


def test_candle_reports_missing_gradients_and_errors_as_outcomes(candle_binary, tmp_path):
    probe = load(REPO / "probes/layer_norm_softmax.yaml")
    f32 = run_candle(candle_binary, probe, "f32", tmp_path)
    assert f32[("softmax_fused", "x.grad")].status == verdicts.MISSING_GRADIENT
    assert f32[("softmax_slow", "x.grad")].status == "ok"
    f64 = run_candle(candle_binary, probe, "f64", tmp_path)
    err = f64[("layer_norm_fused", "y")]
    assert err.status == verdicts.FRAMEWORK_ERROR and "F64" in err.message


# A probe of ops no repository probe uses (views, add) and an SGD step, with hand-derived
# values: r = x.T flattened = [0, 3, 1, 4, 2, 5]; a = 2r; loss = Σ a·w = 130;
# dloss/dx[k, j] = 2·w[2j + k]; θ after SGD(lr 0.5) = x − grad/2.
NEW_PROBE = """
description: Views, add and SGD, for the no-code-change test.
inputs:
  x: {arange: {start: 0}, shape: [2, 3], requires_grad: true}
  w: {arange: {start: 1}, shape: [6]}
cases:
  views:
    steps:
      - transpose: {in: x, dim0: 0, dim1: 1, out: xt}
      - reshape: {in: xt, shape: [6], out: r}
      - unsqueeze: {in: r, dim: 0, out: u}
      - squeeze: {in: u, dim: 0, out: s}
      - add: {in: [s, s], out: a}
    loss: {weighted_sum: [a, w]}
    optimizer: {sgd: {lr: 0.5}}
    compare: [r, a, loss, x.grad, x.after_step]
    exact:
      r: [0, 3, 1, 4, 2, 5]
      a: [0, 6, 2, 8, 4, 10]
      loss: 130
      x.grad: [[2, 6, 10], [4, 8, 12]]
      x.after_step: [[-1, -2, -3], [1, 0, -1]]
"""


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_new_probe_file_runs_without_code_changes(candle_binary, burn_binary, tmp_path, dtype):
    path = tmp_path / "views_and_sgd.yaml"
    path.write_text(NEW_PROBE)
    probe = load(path)
    results = {
        "torch": run_torch(probe, dtype),
        "candle": run_candle(candle_binary, probe, dtype, tmp_path),
        "burn": run_burn(burn_binary, probe, dtype, tmp_path),
    }
    for framework, outcomes in results.items():
        key = ProbeKey(probe.name, framework, dtype, "cpu")
        for case, q in probe.quantities():
            j = judge_probe_row(probe, key, outcomes[(case, q)], results["torch"][(case, q)])
            assert (j.verdict, j.worst) == (verdicts.PASS, 0.0), (framework, q, j)


def test_every_op_is_exercised_by_some_probe():
    """Each op of the schema runs on every framework in the repository's probes, the op
    probes of tests/probes/ops (tests/test_probe_ops_workflow.py) or above."""
    used = set()
    files = [*sorted((REPO / "probes").glob("*.yaml")), *sorted(OPS.glob("*.yaml"))]
    for path in [*files, None]:
        doc = yaml.safe_load(NEW_PROBE if path is None else path.read_text())
        for case in doc["cases"].values():
            used |= {next(iter(step)) for step in case["steps"]}
    assert used == set(op_names())
