"""A run whose framework raised an error during a step (trace status ``failed``, issue 36
kind 4): its comparison gets the verdict ``framework-error`` naming the failed run, its
step and the framework's message, over the steps before the failure; never a crash, never
a pass; the summary shows it, ``check`` fails on it, the localisation is skipped.
"""

from __future__ import annotations

import logging

import numpy as np
import pytest

from parity.compare import job as compare_jobs
from parity.compare import judgement, maths, verdicts
from parity.core import integrity
from parity.core.fileio import sha256_file
from parity.localise.job import skip_reason
from parity.plan.keys import Comparison
from parity.plan.plan import Plan
from parity.report import check, summary
from parity.trace import fixtures
from parity.trace.reader import TraceReader
from parity.trace.schema import TraceLayout
from parity.trace.writer import TraceWriter

from conftest import base_meta

HAND = {
    "devices": ["cpu"],
    "dtypes": ["f32", "f64"],
    "tolerance": 1e-6,
    "experiments": {
        "hand": {
            "model": {"family": "mlp", "sizes": [1, 1, 1], "activation": "relu"},
            "loss": "mse",
            "data": {"seed": 0, "batches": 1, "batch_size": 3},
            "optimizer": {"name": "sgd", "lr": 0.1},
            "steps": 4,
        }
    },
}
SHAPES = {"fc1.weight": (1, 1), "fc1.bias": (1,), "fc2.weight": (1, 1), "fc2.bias": (1,)}
ERROR = "backward of relu is not supported on this device (candle: Unsupported op)"


def trace(path, plan, run, dtype, sha, failed_at=None):
    """A trace of ``run`` (4 steps); with ``failed_at`` one that failed at that step, as the
    Rust runner's wrapper writes it (``TraceWriter.fail``): the steps before it kept."""
    layout = TraceLayout.of(dtype, list(SHAPES.items()))
    meta = base_meta(
        experiment="hand",
        run=run,
        framework=run,
        fixture_sha256=sha,
        config_hash=plan.config_hash("hand", run),
        steps=4,
    )
    np_dtype = np.float32 if dtype == "f32" else np.float64
    with TraceWriter(path, layout, meta) as w:
        for k in range(5 if failed_at is None else failed_at):
            values = {n: np.full(1, 0.5 + 0.125 * k, np_dtype) for n in SHAPES}
            w.write_step(k, None if k == 0 else 1.0, values)
        if failed_at is not None:
            w.fail(failed_at, ERROR)
    return str(path)


@pytest.fixture
def case(tmp_path):
    plan = Plan(HAND)
    fixture = tmp_path / "hand.safetensors"
    fixtures.save(fixture, {"x": np.array([[[-1.0], [0.5], [2.0]]], np.float32)}, {})
    return plan, str(fixture), sha256_file(fixture)


def perstep(tmp_path, plan, fixture, ref, cand):
    job = plan.comparison_job(plan.comparison("hand", "cpu"))
    out = [tmp_path / f"p.{e}" for e in ("csv", "md", "json")]
    result = compare_jobs.perstep_job(job, ref, cand, fixture, *out, logging.getLogger("t"))
    return job, result


def test_a_failed_run_gets_a_verdict_naming_it_its_step_and_the_error(tmp_path, case):
    plan, fixture, sha = case
    ref = trace(tmp_path / "torch.parquet", plan, "torch", "f32", sha)
    cand = trace(tmp_path / "candle.parquet", plan, "candle", "f32", sha, failed_at=3)
    assert TraceReader(cand).steps == [0, 1, 2]
    _, r = perstep(tmp_path, plan, fixture, ref, cand)
    assert r["verdict"] == verdicts.FRAMEWORK_ERROR
    message = f"candle f32 cpu failed at step 3: {ERROR}"
    assert r["failed_runs"] == [
        {"run": "candle f32 cpu", "step": 3, "error": ERROR, "message": message}
    ]
    assert message in r["status"]
    # compared over the steps both hold (the two runs agree there: no pass is made of it)
    assert r["worst_dparam"] == 0.0
    md = (tmp_path / "p.md").read_text()
    assert message in md and "verdict **framework-error**" in md
    assert not verdicts.meets_expectation(r["verdict"])


def test_a_failed_run_is_never_an_expected_fail_of_a_control():
    failed = [{"message": "candle f32 cpu failed at step 1: oops"}]
    j = judgement.judge_failed_runs(failed, 1e-6)
    assert (j.verdict, j.message) == (verdicts.FRAMEWORK_ERROR, failed[0]["message"])
    assert not j.accepted


def test_traces_that_differ_in_steps_without_a_failure_are_still_refused(tmp_path, case):
    plan, _, sha = case
    ref = trace(tmp_path / "torch.parquet", plan, "torch", "f32", sha)
    short = trace(tmp_path / "candle.parquet", plan, "candle", "f32", sha, failed_at=2)
    maths.check_comparable([TraceReader(ref), TraceReader(short)])  # a failed prefix
    complete = TraceReader(short)
    complete.meta = {**complete.meta, "status": "complete"}
    with pytest.raises(maths.ComparisonError, match="record different steps"):
        maths.check_comparable([TraceReader(ref), complete])


def test_the_summary_shows_it_and_check_fails_on_it(tmp_path, case, monkeypatch):
    plan, fixture, sha = case
    monkeypatch.chdir(tmp_path)
    ref = trace(tmp_path / "torch.parquet", plan, "torch", "f32", sha)
    cand = trace(tmp_path / "candle.parquet", plan, "candle", "f32", sha, failed_at=1)
    job, r = perstep(tmp_path, plan, fixture, ref, cand)
    out = [str(tmp_path / f"summary.{e}") for e in ("csv", "md")]
    record = str(tmp_path / "summary.sources.json")
    (row,) = summary.summary([str(tmp_path / "p.json")], [], *out, record)
    assert row["verdict"] == verdicts.FRAMEWORK_ERROR
    assert f"candle f32 cpu failed at step 1: {ERROR}" in row["status"]
    md = (tmp_path / "summary.md").read_text()
    assert f"hand main cpu: framework-error** (candle f32 cpu failed at step 1: {ERROR})" in md
    records = []
    log = logging.getLogger("check-test")
    monkeypatch.setattr(log, "error", lambda msg, *a: records.append(msg % a if a else msg))
    bad = check.check(out[0], log, summary_record=record)
    assert [b["verdict"] for b in bad] == [verdicts.FRAMEWORK_ERROR]
    assert any("candle f32 cpu failed at step 1" in m for m in records)
    # its localisation is skipped: a replay would only fail again
    reason = skip_reason(r, Comparison.from_params(job["comparison"]), localise_all=True)
    assert reason == f"a run failed: candle f32 cpu failed at step 1: {ERROR}"


def test_a_failed_float64_run_makes_the_summary_row_a_framework_error(tmp_path, case):
    plan, fixture, sha = case
    paths = {
        "ref32": trace(tmp_path / "t32.parquet", plan, "torch", "f32", sha),
        "cand32": trace(tmp_path / "c32.parquet", plan, "candle", "f32", sha),
        "ref64": trace(tmp_path / "t64.parquet", plan, "torch", "f64", sha),
        "cand64": trace(tmp_path / "c64.parquet", plan, "candle", "f64", sha, failed_at=2),
    }
    job, r = perstep(tmp_path, plan, fixture, paths["ref32"], paths["cand32"])
    assert r["verdict"] == "pass" and r["failed_runs"] == []
    outputs = {
        kind: {e: str(tmp_path / f"{kind}.{e}") for e in compare_jobs.FLOAT64_OUTPUTS}
        for kind in ("split", "diagnosis")
    }
    results = compare_jobs.float64_job(
        job, paths, fixture, str(tmp_path / "p.json"), outputs, logging.getLogger("t")
    )
    split = results["split"]
    assert [f["run"] for f in split["failed_runs"]] == ["candle f64 cpu"]
    rows = summary.summary_rows(
        {
            "p": integrity.read_sealed_json(tmp_path / "p.json"),
            "s": integrity.read_sealed_json(outputs["split"]["result"]),
        },
        [],
    )
    (row,) = rows
    assert row["verdict"] == verdicts.FRAMEWORK_ERROR
    assert row["status"] == f"candle f64 cpu failed at step 2: {ERROR}"
