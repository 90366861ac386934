"""End-to-end: burn's backend axis with real builds (.test/burn_backends.yaml): burn 0.22.1
on ndarray (the primary run), on Flex, and 0.23.0-pre.1 on Flex, each its own build job and
binary, on the transformer and the GELU backward probe. The GELU backward fault is
ndarray's (burn-backend's default tanh derivative), not burn's: Flex overrides it."""

import csv
import subprocess

import pytest

from parity.plan import versions
from parity.trace.reader import TraceReader

from conftest import load_test_config, run_workflow

pytestmark = pytest.mark.workflow

ENTRIES = {
    "burn": "0.22.1",
    "burn_v0_22_1_flex": "0.22.1+flex",
    "burn_v0_23_0_pre_1_flex": "0.23.0-pre.1+flex",
}


def read_csv(path):
    with open(path, encoding="utf-8") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("burn-backends")
    config = load_test_config("burn_backends")
    assert config["burn"]["versions"] == list(ENTRIES.values())
    run_workflow(workdir, config, "--cores", "2", "results/tables/versions.csv")
    return workdir


def test_each_entry_is_a_binary_that_reports_its_release_and_backend(workdir):
    for entry in ENTRIES.values():
        binary = workdir / versions.runner_binary("burn", entry, "cpu")
        out = subprocess.run([binary, "version"], capture_output=True, text=True, check=True)
        assert out.stdout.strip() == entry


def test_each_trace_names_the_entry_that_made_it(workdir):
    for run, entry in ENTRIES.items():
        for dtype in ("f32", "f64"):
            trace = workdir / f"results/traces/transformer_adamw/{run}-{dtype}-cpu.parquet"
            meta = TraceReader(trace).meta
            assert meta["framework_version"] == entry, (run, dtype)
    for run, backend in (("burn", "NdArray"), ("burn_v0_23_0_pre_1_flex", "Flex")):
        trace = workdir / f"results/traces/transformer_adamw/{run}-f32-cpu.parquet"
        runner = TraceReader(trace).meta["runner"]
        assert f"device: {backend}" in runner["device_detail"], runner
        assert runner["features"] == backend.lower()


def test_the_gelu_fault_follows_the_backend(workdir):
    rows = {
        (r["experiment"], r["comparison"]): r
        for r in read_csv(workdir / "results/tables/summary.csv")
    }
    ndarray = rows[("transformer_adamw", "burn")]
    assert ndarray["verdict"] == "expected-fail"
    assert ndarray["culprit"] == "grad:blocks.1.mlp.fc1.out"
    for run in ("burn_v0_22_1_flex", "burn_v0_23_0_pre_1_flex"):
        assert rows[("transformer_adamw", run)]["verdict"] == "pass", run
        # Flex against ndarray: the releases are expected to differ, at the GELU backward.
        vs = rows[("transformer_adamw", run + "_vs_primary")]
        assert vs["verdict"] == "expected-fail"
        assert vs["culprit"] == "grad:blocks.1.mlp.fc1.out"


@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_the_release_matrix_has_a_column_per_backend(workdir, dtype):
    rows = read_csv(workdir / "results/tables/versions.csv")
    cols = ["burn 0.22.1 ndarray", "burn 0.22.1 flex", "burn 0.23.0-pre.1 flex"]
    (probe,) = [
        r
        for r in rows
        if (r["subject"], r["framework"], r["dtype"]) == ("gelu_backward/erf", "burn", dtype)
    ]
    assert [probe[c] for c in cols] == ["reproduced", "fixed", "fixed"]
    assert probe["known"] == "known bug in 0.22.1 ndarray"
    (exp,) = [r for r in rows if r["subject"] == "transformer_adamw/burn"]
    assert [exp[c] for c in cols] == ["reproduced", "fixed", "fixed"]
    md = (workdir / "results/tables/versions.md").read_text()
    assert "| 0.22.1 ndarray | 0.22.1 flex | 0.23.0-pre.1 flex |" in md
