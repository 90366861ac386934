"""Every limit is one value from the plan to the readers (issue 60, kind 1): a config that
raises ``limits.max_steps``, ``limits.max_tensor_elements`` or
``limits.max_probe_tensor_elements`` gets a run at the new size planned, written, read and
compared, and a probe at the new size read by every stage; lowered, the limits still bite.

A run beyond the real defaults (10⁶ steps, 10⁸ elements) is no test, so the defaults are
lowered here (:data:`LOWERED`) and the config raises them back above a quick run's size
(:data:`RAISED`): the size between them is checked both ways.
"""

from __future__ import annotations

import copy
import logging
import shutil
import struct

import numpy as np
import pytest
from safetensors.numpy import save

from parity.compare import job as compare_jobs
from parity.compare import verdicts
from parity.core.config import ConfigError
from parity.fuzz import report as fuzz_report
from parity.localise import replay
from parity.plan import limits
from parity.plan.keys import RunKey
from parity.plan.plan import Plan
from parity.probe import loader
from parity.probe.format import ProbeError
from parity.report.pages import provenance
from parity.trace import fixtures, frames
from parity.trace.reader import TraceReader
from parity.trace.schema import TraceError, reader_limits
from parity.train import torch as torch_runner

from conftest import REPO

LOG = logging.getLogger("test_limit_stages")

#: The defaults as this test lowers them, below the run and the probe it makes.
LOWERED = {"max_steps": 5, "max_tensor_elements": 20, "max_probe_tensor_elements": 20}
#: The config's limits, raised above them again.
RAISED = {"max_steps": 8, "max_tensor_elements": 64, "max_probe_tensor_elements": 64}

#: 7 steps (more than LOWERED's 5) of an MLP whose first layer has 2 × 12 = 24 weights and
#: whose widest activation is 3 × 12 = 36 elements (more than 20, at most 64); two PyTorch
#: runs, so the test needs no Rust runner.
CONFIG = {
    "devices": ["cpu"],
    "dtypes": ["f32"],
    "tolerance": 1e-5,
    "experiments": {
        "big": {
            "model": {"family": "mlp", "sizes": [2, 12, 1], "activation": "relu"},
            "loss": "mse",
            "data": {"seed": 0, "batches": 1, "batch_size": 3},
            "optimizer": {"name": "sgd", "lr": 0.1},
            "steps": 7,
            "runs": {"torch": {}, "torch_foreach": {"optimizer_path": "foreach"}},
            "comparisons": {"main": {"reference": "torch", "candidate": "torch_foreach"}},
        }
    },
}


@pytest.fixture
def lowered(monkeypatch):
    """The defaults lowered to :data:`LOWERED` for the test's duration."""
    for k, v in LOWERED.items():
        monkeypatch.setitem(limits.DEFAULTS, k, v)


def config(**given) -> dict:
    out = copy.deepcopy(CONFIG)
    if given:
        out["limits"] = given
    return out


def test_a_run_beyond_a_limit_the_config_keeps_is_refused_at_plan_time(lowered):
    with pytest.raises(ConfigError) as e:
        limits.check_plan(Plan(config()), limits.settings(config()))
    assert "experiments.big.steps: steps: 7, more than limits.max_steps (5)" in str(e.value)
    assert "parameter fc1.weight has 24, more than limits.max_tensor_elements (20)" in str(e.value)
    # raised partly, the other limit still bites
    with pytest.raises(ConfigError, match=r"more than limits\.max_tensor_elements \(20\)"):
        limits.check_plan(Plan(config(max_steps=8)), limits.settings(config(max_steps=8)))


def test_a_raised_limit_holds_from_plan_to_writer_reader_and_comparison(tmp_path, lowered):
    cfg = config(**RAISED)
    lim = limits.settings(cfg)
    plan = Plan(cfg)
    limits.check_plan(plan, lim)  # planned
    fixture = str(tmp_path / "big.safetensors")
    fixtures.write(fixture, plan.fixture_settings("big"))
    traces = {}
    for run in ("torch", "torch_foreach"):  # written, by the runner's own writer
        key = RunKey("big", run, "f32", "cpu")
        traces[run] = str(tmp_path / f"{run}.parquet")
        torch_runner.train(key, plan.run_settings("big", run), fixture, traces[run], 1, LOG)
    # compared: the comparison job reads both against their expectations
    job = plan.comparison_job(plan.comparison("big", "cpu"))
    out = [tmp_path / f"perstep.{e}" for e in ("csv", "md", "json")]
    result = compare_jobs.perstep_job(
        job, traces["torch"], traces["torch_foreach"], fixture, *out, LOG
    )
    assert result["verdict"] == verdicts.PASS
    reader = compare_jobs.open_trace(job, "ref32", traces["torch"])
    assert reader.steps == list(range(8)) and reader.layout.numel("fc1.weight") == 24
    # read by a page that has no expectation: within the config's limits
    rows = provenance(list(traces.values()), tmp_path / "p.csv", tmp_path / "p.md", lim)
    assert [r["run"] for r in rows] == ["torch", "torch_foreach"]
    # ... and refused, naming the limit, by a reader held to the (lowered) defaults
    with pytest.raises(TraceError, match=r"'steps' is 7, beyond 0\.\.5 \(limits\.max_steps"):
        TraceReader(traces["torch"])
    with pytest.raises(TraceError, match=r"24 elements, more than limits\.max_tensor_elements"):
        TraceReader(traces["torch"], limits={"max_steps": 8})


def test_a_reader_is_bounded_by_the_config_or_the_expectation_never_by_the_defaults(
    tmp_path, lowered
):
    cfg = config(**RAISED)
    plan = Plan(cfg)
    fixture = str(tmp_path / "big.safetensors")
    fixtures.write(fixture, plan.fixture_settings("big"))
    key = RunKey("big", "torch", "f32", "cpu")
    path = str(tmp_path / "t.parquet")
    torch_runner.train(key, plan.run_settings("big", "torch"), fixture, path, 1, LOG)
    expect = plan.trace_expectation(key)
    assert reader_limits(None, expect) == {"max_steps": 7, "max_tensor_elements": 24}
    assert reader_limits(limits.settings(cfg)) == {"max_steps": 8, "max_tensor_elements": 64}
    assert reader_limits() == {"max_steps": 5, "max_tensor_elements": 20}
    TraceReader(path, expect=expect)
    TraceReader(path, limits=limits.settings(cfg))
    # a config whose limits are below the trace refuses it too (a trace from elsewhere)
    low = {"max_steps": 6, "max_tensor_elements": 64}
    with pytest.raises(TraceError, match=r"'steps' is 7, beyond 0\.\.6"):
        TraceReader(path, limits=low)
    # an expectation raises the bound to what it asks for, no further
    with pytest.raises(TraceError, match=r"'steps' is 7, beyond 0\.\.6"):
        TraceReader(path, expect={"steps": 6})


def test_a_raised_probe_limit_holds_for_every_reader_of_the_probe(tmp_path, lowered):
    path = tmp_path / "conv1d_contiguity.yaml"  # its largest tensor holds 24 elements
    shutil.copy(REPO / "probes" / "conv1d_contiguity.yaml", path)
    with pytest.raises(ProbeError, match=r"more than limits\.max_probe_tensor_elements \(20\)"):
        loader.load(path)
    with pytest.raises(ProbeError, match=r"max_probe_tensor_elements \(20\)"):
        fuzz_report.known_bug_cases([path])
    lim = limits.settings(config(**RAISED))
    assert loader.load(path, lim).name == "conv1d_contiguity"  # the probe plan's reading
    # the fuzz job matches findings with the same probes, read within the same limits
    known = fuzz_report.known_bug_cases([path], limits=lim)
    assert {k["probe"] for k in known} == {"conv1d_contiguity"}
    assert fuzz_report.known_bug_cases(tmp_path, limits=lim) == known


def test_a_localisation_reads_the_traces_of_a_raised_limit(tmp_path, lowered, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the reference trace lies at its path under results/
    cfg = config(**RAISED)
    plan = Plan(cfg)
    fixture = str(tmp_path / "big.safetensors")
    fixtures.write(fixture, plan.fixture_settings("big"))
    key = RunKey("big", "torch", "f32", "cpu")
    settings = plan.run_settings("big", "torch")
    (tmp_path / key.trace).parent.mkdir(parents=True)
    torch_runner.train(key, settings, fixture, key.trace, 1, LOG)
    # the state after step 2, retrained (its trace: 24-element weights, more than the
    # lowered default) and checked against the reference trace (7 steps, more than it)
    state, notes = replay.reference_state(key, settings, fixture, 3, str(tmp_path), 1, LOG, None)
    assert state["fc1.weight"].shape == (12, 2)
    assert "state after step 2 equals the reference trace bit for bit" in notes


def test_a_runner_output_in_memory_may_hold_frames_as_large_as_itself(monkeypatch):
    # A replay's or a probe's frame holds tensors the config's limits bound, which it may
    # raise past the stream reader's fixed bound (16 GiB; lowered here to 100 bytes).
    monkeypatch.setattr(frames, "MAX_FRAME", 100)
    body = save({"w": np.zeros(1000, np.float32)}, metadata={"kind": "result"})
    data = struct.pack("<Q", len(body)) + body
    (got,) = frames.read_buffer(data)
    assert got.tensors["w"].shape == (1000,)
    with pytest.raises(frames.FrameError, match="stream ends inside a frame"):
        list(frames.read_buffer(data[:-3]))  # a cut-short stream is still named as one
