"""A remote host's cells in this host's tables, without a server: the cross-host rows in the
summary (device ``cpu@mac``) and their gate in ``check``, the error rows of a host that
failed, and the remote probe rows judged against this host's reference with the known bugs
of the device before ``@``."""

from __future__ import annotations

import csv
import json
import logging
from pathlib import Path

import numpy as np
import pytest

from parity.compare import verdicts
from parity.core import hosts, integrity, paths
from parity.plan.plan import Plan
from parity.probe import table as probes_table
from parity.probe.format import Probe
from parity.probe.judge import judge_probe_row
from parity.probe.plan import ProbeKey, ProbePlan
from parity.probe.results import Outcome
from parity.remote import crosshost
from parity.remote import fetch as remote
from parity.report import check, partial, summary

from conftest import load_test_config

EXPERIMENT = "a3_sgd_pair"
LOG = logging.getLogger("test")


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    """Run in an empty working directory (the tables' lock and results/ are relative)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "results" / "tables").mkdir(parents=True)
    return tmp_path


def params(host="mac", devices=("cpu",)) -> dict:
    return crosshost.crosshost_params(
        Plan(load_test_config("remote")), host, list(devices), EXPERIMENT
    )


def crosshost_row(kind, name, dtype, device, worst, verdict, expected="pass", tol=1e-6):
    return {
        "experiment": EXPERIMENT,
        "kind": kind,
        "name": name,
        "dtype": dtype,
        "device": device,
        "reference": f"{name} {dtype} cpu",
        "candidate": f"{name} {dtype} {device}",
        "worst_dparam": worst,
        "worst_step": 3,
        "bitwise_identical": worst == 0.0,
        "tolerance": tol,
        "verdict": verdict,
        "expected_verdict": expected,
        "reference_host": "here",
        "candidate_host": "mac.local",
        "reference_cpu": "x86",
        "candidate_cpu": "M2",
        "reference_version": "2.15.0",
        "candidate_version": "2.15.0",
    }


# ----- the summary ---------------------------------------------------------------------------


def test_expected_cells_name_each_row_a_host_owes_with_its_device_label():
    p = params(devices=("metal", "cpu"))
    cells = crosshost.expected_cells(p)
    keys = {(c["comparison"], c["device"]) for c in cells}
    assert ("same run torch f32", "metal@mac") in keys
    assert ("same run candle f64", "cpu@mac") in keys
    assert ("main", "metal@mac") in keys and ("main", "cpu@mac") in keys
    assert not any(d == "metal@mac" and "f64" in c for c, d in keys)  # no float64 on Metal
    same = [c for c in cells if c["comparison"].startswith("same run")]
    # a run made on two hosts is held to the config's tolerance and must pass
    assert {c["tolerance"] for c in same} == {1e-6}
    assert {c["expected_verdict"] for c in cells} == {verdicts.PASS}
    assert len(keys) == len(cells)  # (comparison, device) names one row


def test_crosshost_rows_become_summary_rows_and_check_gates_on_them(in_tmp):
    result = {
        "kind": "crosshost",
        "experiment": EXPERIMENT,
        "host": "mac",
        "rows": [
            crosshost_row("same run", "torch", "f32", "cpu@mac", 0.0, verdicts.PASS),
            crosshost_row("same run", "candle", "f32", "cpu@mac", 3.0e-6, verdicts.FAIL),
            crosshost_row("comparison", "main", "f32", "cpu@mac", None, verdicts.FAIL),
        ],
        "sources": {},
    }
    path = in_tmp / "results/compare/a3_sgd_pair/crosshost-mac.json"
    path.parent.mkdir(parents=True)
    integrity.write_sealed_json(path, result)
    out = [str(in_tmp / f"results/tables/summary.{e}") for e in ("csv", "md")]
    record = str(in_tmp / "results/tables/summary.sources.json")
    rows = summary.summary([str(path)], [], *out, record)
    by_key = {(r["comparison"], r["device"]): r for r in rows}
    assert set(by_key) == {
        ("same run torch f32", "cpu@mac"),
        ("same run candle f32", "cpu@mac"),
        ("main", "cpu@mac"),
    }
    assert by_key[("same run torch f32", "cpu@mac")]["pair"] == "torch f32 cpu vs torch f32 cpu@mac"
    assert by_key[("main", "cpu@mac")]["worst_dparam"] == float("inf")  # null: diverged
    assert by_key[("same run candle f32", "cpu@mac")]["candidate_host"] == "mac.local"
    bad = check.check(out[0], LOG, summary_record=record)
    assert {(r["comparison"], r["device"], r["verdict"]) for r in bad} == {
        ("same run candle f32", "cpu@mac", "fail"),
        ("main", "cpu@mac", "fail"),
    }


def test_a_failed_host_is_error_rows_naming_the_host_stage_log_and_missing_traces(in_tmp):
    p = params()
    status = in_tmp / hosts.REMOTE_STATUS.format(host="mac")
    status.parent.mkdir(parents=True)
    status.write_text(json.dumps({"stage": "rsync", "error": "remote mac: the transfer stopped"}))
    # one trace came back whole before the cut
    here = in_tmp / hosts.remote_file("mac", f"results/traces/{EXPERIMENT}/torch-f32-cpu.parquet")
    here.parent.mkdir(parents=True)
    here.write_bytes(b"x")
    job = {
        "host": "mac",
        "experiment": EXPERIMENT,
        "result": paths.CROSSHOST_RESULT.format(experiment=EXPERIMENT, host="mac"),
        "job": p,
    }
    out = [f"results/tables/summary.partial.{e}" for e in ("csv", "md")]
    n = partial.partial_summary(
        [], [], {}, *out, "results/tables/summary.partial.sources.json", (), [job]
    )
    with open(out[0], encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert n == len(rows) == len(crosshost.expected_cells(p)) == 5
    assert {r["verdict"] for r in rows} == {verdicts.ERROR}
    assert {r["device"] for r in rows} == {"cpu@mac"}
    for r in rows:
        assert "remote host mac: rsync failed (remote mac: the transfer stopped)" in r["status"]
        assert "see results/logs/remote/mac.log" in r["status"]
    by = {r["comparison"]: r["status"] for r in rows}
    # the remote's torch f32 came back; this host's has not been made in this folder
    assert by["same run torch f32"].endswith("(not here: torch f32 cpu)")
    assert by["same run candle f32"].endswith("(not here: candle f32 cpu, candle f32 cpu@mac)")
    assert by["main"].endswith("(not here: candle f32 cpu@mac)")  # torch f32 cpu@mac is here
    md = Path(out[1]).read_text()
    assert "same run candle f64" in md and "cpu@mac" in md
    # once its manifest is written, a missing result is the cross-host job's: its log
    Path(remote.REMOTE_MANIFEST.format(host="mac")).write_text("{}")
    (row,) = partial.remote_error_rows({**job, "job": {**p, "comparisons": []}}, "gone")[:1]
    assert row["status"].startswith("remote host mac: no current cross-host result (gone)")
    assert paths.CROSSHOST_LOG.format(experiment=EXPERIMENT, host="mac") in row["status"]


def test_host_status_says_not_run_when_no_attempt_recorded_a_failure(in_tmp):
    s = hosts.host_status("mac")
    assert s == {
        "stage": "not run",
        "error": "its job did not run (an earlier job failed)",
        "log": "results/logs/remote/mac.log",
    }
    Path("results/remote/mac").mkdir(parents=True)
    Path(remote.REMOTE_MANIFEST.format(host="mac")).write_text("{}")
    assert hosts.host_status("mac") is None


# ----- the probe table ------------------------------------------------------------------------


def _probe() -> Probe:
    case = {
        "name": "c",
        "note": "",
        "steps": [],
        "loss": None,
        "optimizer": None,
        "optimizer_steps": 1,
        "compare": ["y"],
        "exact": {},
        # candle's CPU gives 5, 5: recorded for the device, so cpu@mac takes it too
        "known_bug": {"candle": {"cpu": {"y": {"values": [5.0, 5.0]}}}},
        "expect": "values",
    }
    spec = {
        "probe": "p",
        "description": "hand-made",
        "tolerance": {"f32": 0.0, "f64": 0.0, "f16": 0.0, "bf16": 0.0},
        "inputs": [
            {"name": "x", "dtype": "float", "shape": [2], "values": [1, 2], "requires_grad": True}
        ],
        "cases": [case],
    }
    return Probe("p", spec)


def _results(plan: ProbePlan, values: dict) -> dict:
    return {
        k: {("c", "y"): Outcome.ok("c", "y", np.asarray(values[k.framework, k.dtype]), (2,))}
        for k in plan.jobs()
        if (k.framework, k.dtype) in values
    }


def test_base_device_drops_the_host_and_known_bugs_apply_to_it():
    key = ProbeKey("p", "candle", "f32", "cpu@mac")
    assert key.base_device == "cpu" and ProbeKey("p", "candle", "f32", "cpu").base_device == "cpu"
    assert not key.is_reference and key.reference == ProbeKey("p", "torch", "f32", "cpu")
    ref = Outcome.ok("c", "y", np.array([1.0, 2.0]), (2,))
    bug = Outcome.ok("c", "y", np.array([5.0, 5.0]), (2,))
    assert judge_probe_row(_probe(), key, bug, ref).verdict == verdicts.KNOWN_BUG
    other = ProbeKey("p", "candle", "f32", "cuda@mac")  # no bug recorded for cuda
    assert judge_probe_row(_probe(), other, bug, ref).verdict == verdicts.FAIL


def test_remote_probe_rows_are_judged_against_this_hosts_cpu(tmp_path):
    plan = ProbePlan({"p": _probe()}, ["cpu"], ["f32"])
    here = _results(
        plan, {("torch", "f32"): [1, 2], ("torch", "f64"): [1, 2], ("candle", "f32"): [1, 2]}
    )
    here |= _results(plan, {("burn", "f32"): [1, 2]})
    there = probes_table.RemoteProbes(probes_table.remote_plan(plan, ["cpu"]))
    # there: PyTorch differs from PyTorch here; candle reproduces the CPU's known bug
    there.results = _results(
        there.plan,
        {
            ("torch", "f32"): [1, 3],
            ("torch", "f64"): [1, 2],
            ("candle", "f32"): [5, 5],
            ("burn", "f32"): [1, 2],
        },
    )
    rows = probes_table.table_rows(plan, here, {}, {"mac": there})
    remote_rows = {(r["framework"], r["dtype"]): r for r in rows if r["device"] == "cpu@mac"}
    assert set(remote_rows) == {
        ("torch", "f32"),
        ("torch", "f64"),
        ("candle", "f32"),
        ("burn", "f32"),
    }
    # this host's PyTorch is the reference, also of the remote's PyTorch
    assert remote_rows[("torch", "f32")]["verdict"] == verdicts.FAIL
    assert remote_rows[("torch", "f32")]["reference"] == "torch f32 cpu"
    assert remote_rows[("torch", "f32")]["max_diff"] == 1.0
    assert remote_rows[("torch", "f64")]["verdict"] == verdicts.PASS
    assert remote_rows[("candle", "f32")]["verdict"] == verdicts.KNOWN_BUG
    assert remote_rows[("burn", "f32")]["verdict"] == verdicts.PASS
    local = {(r["framework"], r["dtype"]): r["verdict"] for r in rows if r["device"] == "cpu"}
    assert local[("torch", "f32")] == verdicts.REFERENCE
    assert local[("candle", "f32")] == verdicts.KNOWN_BUG_FIXED  # here it gives 1, 2


def test_a_host_without_results_is_an_error_row_per_cell_naming_host_and_log(in_tmp):
    plan = ProbePlan({"p": _probe()}, ["cpu"], ["f32"])
    status = in_tmp / hosts.REMOTE_STATUS.format(host="mac")
    status.parent.mkdir(parents=True)
    status.write_text(json.dumps({"stage": "bootstrap", "error": "remote mac: bootstrap failed"}))
    got, made_from = probes_table.gather_remote(plan, {"mac": ["cpu"]})
    assert made_from == {} and got["mac"].results == {}
    assert set(got["mac"].errors) == set(plan.jobs())
    local_errors = {k: FileNotFoundError(k.result) for k in plan.jobs()}  # nothing here either
    rows = probes_table.table_rows(plan, {}, local_errors, got)
    remote_rows = [r for r in rows if r["device"] == "cpu@mac"]
    assert len(remote_rows) == len(plan.jobs())
    for r in remote_rows:
        assert r["verdict"] == verdicts.ERROR
        assert "remote host mac: bootstrap failed (remote mac: bootstrap failed)" in r["note"]
        assert r["note"].endswith("see results/logs/remote/mac.log")
    assert probes_table.remote_results(plan, {"mac": ["cpu"]}) == [
        f"results/remote/mac/probes/p/{k.framework}-{k.dtype}-cpu.parquet" for k in plan.jobs()
    ]


def test_a_remote_probe_result_not_in_the_manifest_is_not_read(in_tmp):
    plan = ProbePlan({"p": _probe()}, ["cpu"], ["f32"])
    manifest = Path(remote.REMOTE_MANIFEST.format(host="mac"))
    manifest.parent.mkdir(parents=True)
    key = plan.jobs()[0]
    path = Path(hosts.remote_file("mac", key.result))
    path.parent.mkdir(parents=True)
    path.write_bytes(b"not the manifest's")
    manifest.write_text(json.dumps({"files": {str(path): "0" * 64}}))
    got, made_from = probes_table.gather_remote(plan, {"mac": ["cpu"]})
    assert "sha256 differs from the manifest's" in str(got["mac"].errors[key])
    others = [k for k in plan.jobs() if k != key]
    assert all("is not in the host's manifest" in str(got["mac"].errors[k]) for k in others)
    assert made_from == {}
