"""End-to-end: the version axis with two real candle releases (.test/versions.yaml). The
primary release runs first; adding 0.11.1 to candle.versions then schedules only that
release's build, runs, probes and comparisons and the tables over all of them; the
release matrix reads the measured results."""

import csv

import pytest

from parity.plan import versions
from parity.trace.reader import TraceReader

from conftest import load_test_config, run_workflow

pytestmark = pytest.mark.workflow

MATRIX = "results/tables/versions.csv"
#: Rules whose jobs belong to the primary release alone: none may run when 0.11.1 is added.
PRIMARY_ONLY = ("train_torch", "train_burn", "probe_torch", "probe_burn", "probe_candle")


def pending_outputs(proc) -> list[tuple[str, str]]:
    """(rule, output file) of every output that ``snakemake --summary`` says a run would
    make (its plan column is not "no update")."""
    out = []
    for line in proc.stdout.splitlines():
        cols = line.split("\t")
        if len(cols) == 6 and cols[0].startswith("results/") and cols[5] != "no update":
            out.append((cols[2], cols[0]))
    return out


def read_csv(path):
    with open(path, encoding="utf-8") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def releases(tmp_path_factory):
    """The primary release's run, what adding 0.11.1 would make, and the run with both
    releases: (workdir, the primary's matrix rows, (rule, output) pending, matrix rows)."""
    workdir = tmp_path_factory.mktemp("versions")
    both = load_test_config("versions")
    assert both["candle"]["versions"] == ["0.11.0", "0.11.1"]
    primary = {**both, "candle": {**both["candle"], "versions": ["0.11.0"]}}
    run_workflow(workdir, primary, "--cores", "2", MATRIX)
    first = read_csv(workdir / MATRIX)
    planned = run_workflow(workdir, both, "--summary", "--cores", "2", MATRIX)
    run_workflow(workdir, both, "--cores", "2", MATRIX)
    again = run_workflow(workdir, both, "-n", "--cores", "2", MATRIX)
    assert "Nothing to be done" in again.stdout, again.stdout[-3000:]
    return workdir, first, pending_outputs(planned), read_csv(workdir / MATRIX)


def test_adding_a_release_schedules_only_its_build_runs_probes_and_the_tables(releases):
    _, _, jobs, _ = releases
    rules = {r for r, _ in jobs}
    assert not rules & set(PRIMARY_ONLY), sorted(rules)
    assert len(jobs) > 20, jobs
    builds = [out for r, out in jobs if r.startswith("build_")]
    assert builds == ["results/bin/candle-parity-0.11.1-cpu"]
    runs = sorted(out for r, out in jobs if r == "train_candle")
    assert runs == [
        f"results/traces/{e}/candle_v0_11_1-{dt}-cpu.parquet"
        for e in ("a3_sgd", "cnn_adam_conv1d")
        for dt in ("f32", "f64")
    ]
    assert sorted(out for r, out in jobs if r == "probe_candle_release") == [
        f"results/probes/{p}/candle_v0_11_1-{dt}-cpu.parquet"
        for p in ("conv1d_grad", "conv2d_grad", "index_select_strided_ids")
        for dt in ("f32", "f64")
    ]
    # Comparisons: only the new names (the twins with PyTorch and the one with 0.11.0).
    compared = {out for r, out in jobs if r in ("perstep", "compare")}
    assert compared and all("_v0_11_1" in out for out in compared), sorted(compared)
    assert {"summary", "probes_table", "versions_table"} <= rules


def test_each_release_trace_names_its_release(releases):
    workdir = releases[0]
    for run, want in (("candle", "0.11.0"), ("candle_v0_11_1", "0.11.1")):
        meta = TraceReader(workdir / f"results/traces/a3_sgd/{run}-f32-cpu.parquet").meta
        assert meta["framework_version"] == want
        binary = workdir / versions.runner_binary("candle", want, "cpu")
        assert binary.stat().st_size > 0


def test_the_primary_matrix_has_one_release_column(releases):
    _, first, _, _ = releases
    assert first and "candle 0.11.1" not in first[0]
    row = next(r for r in first if r["subject"] == "conv1d_grad/batch2" and r["dtype"] == "f32")
    assert row["candle 0.11.0"] == "reproduced"


def cell(rows, subject, dtype="f32", framework="candle"):
    (r,) = [
        r
        for r in rows
        if (r["subject"], r["dtype"], r["framework"], r["device"])
        == (subject, dtype, framework, "cpu")
    ]
    return r


@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_both_releases_reproduce_the_conv1d_kernel_gradient_fault(releases, dtype):
    rows = releases[3]
    r = cell(rows, "conv1d_grad/batch2", dtype)
    assert (r["candle 0.11.0"], r["candle 0.11.1"]) == ("reproduced", "reproduced")
    for v in ("0.11.0", "0.11.1"):
        assert "w.grad = [220, 256, 292, 508, 608, 708] (known-bug" in r[f"candle {v} detail"]


@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_the_newer_release_fixes_the_strided_ids_backward(releases, dtype):
    rows = releases[3]
    r = cell(rows, "index_select_strided_ids/strided", dtype)
    assert (r["candle 0.11.0"], r["candle 0.11.1"]) == ("reproduced", "fixed")
    assert r["known"] == "known bug in 0.11.0"
    assert "index-add only supports contiguous tensors" in r["candle 0.11.0 detail"]
    assert r["candle 0.11.1 detail"] == "x.grad = [1, 2, 0, 0, 8, 10] (pass, max|Δ| vs exact 0)"


def test_the_conv1d_experiment_fails_in_both_releases(releases):
    rows = releases[3]
    r = cell(rows, "cnn_adam_conv1d/main", "")
    assert r["kind"] == "experiment" and r["known"] == "expected to fail"
    assert (r["candle 0.11.0"], r["candle 0.11.1"]) == ("reproduced", "reproduced")


def test_the_summary_compares_the_release_with_pytorch_and_with_the_primary(releases):
    workdir = releases[0]
    rows = {
        (r["experiment"], r["comparison"]): r
        for r in read_csv(workdir / "results/tables/summary.csv")
    }
    assert rows[("cnn_adam_conv1d", "main_v0_11_1")]["verdict"] == "expected-fail"
    assert rows[("a3_sgd", "main_v0_11_1")]["verdict"] == "pass"
    for e in ("a3_sgd", "cnn_adam_conv1d"):
        assert rows[(e, "candle_v0_11_1_vs_primary")]["verdict"] == "pass"


def test_the_probe_table_has_a_version_column(releases):
    workdir = releases[0]
    rows = read_csv(workdir / "results/tables/probes.csv")
    got = {(r["framework"], r["version"]) for r in rows}
    assert got == {("torch", ""), ("candle", "0.11.0"), ("candle", "0.11.1"), ("burn", "0.22.1")}
