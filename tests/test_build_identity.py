"""Issue 60, kind 3: the provenance that says which build made something is compared with
what this checkout and config build, not only recorded.

* A runner binary's build record (``<binary>.record.json``: its name, sha256, source id) is
  held to the binary's own name and to the name and source id that ``parity.plan.builds``
  computes for the job, so another build's binary copied in *with its record* (another
  candle release, burn backend, own port, or an older checkout's build) is refused before
  it runs, in one line naming both builds: by the training job, the probe batch, the
  optimizer defaults, the replay.
* A trace's recorded runner source id (``runner.source_id``) is held by the comparison to
  the one this checkout and config build for its run (``Plan.trace_expectation``).

No cargo build: the binaries are shell scripts with build records written as a build job
writes them; the source ids are what the workflow's build rules compute.
"""

from __future__ import annotations

import importlib.metadata
import logging
import os
import re
import shutil

import numpy as np
import pytest

from parity.compare import job as compare_jobs
from parity.core import integrity
from parity.core.fileio import sha256_file
from parity.plan import builds, versions
from parity.plan.keys import RunKey
from parity.plan.plan import Plan
from parity.probe import rust as rust_probe
from parity.probe.plan import ProbeKey, ProbePlan
from parity.probe.results import ProbeResultError, read_results, write_results
from parity.trace import fixtures
from parity.trace.schema import TraceError, TraceLayout
from parity.trace.writer import TraceWriter
from parity.train import optimizer_defaults
from parity.train import rust as rust_runner

from conftest import REPO, base_meta, load_config

LOG = logging.getLogger("test")
CONFIG = load_config()

HAND = {
    "devices": ["cpu"],
    "dtypes": ["f32", "f64"],
    "tolerance": 1e-6,
    "candle": {"versions": ["0.11.0", "0.11.1"]},
    "burn": {"versions": ["0.22.1", "0.22.1+flex"]},
    "experiments": {
        "hand": {
            "model": {"family": "mlp", "sizes": [1, 1, 1], "activation": "relu"},
            "loss": "mse",
            "data": {"seed": 0, "batches": 1, "batch_size": 3},
            "optimizer": {"name": "sgd", "lr": 0.1},
            "steps": 4,
            "runs": {"torch": {}, "candle": {}, "burn": {}},
            "comparisons": {
                "main": {"reference": "torch", "candidate": "candle"},
                "burn": {"reference": "torch", "candidate": "burn"},
            },
        }
    },
}
#: The name of candle 0.11.1's binary, as a pattern.
THEIRS = re.escape("candle-parity-0.11.1-cpu")
SHAPES = {"fc1.weight": (1, 1), "fc1.bias": (1,), "fc2.weight": (1, 1), "fc2.bias": (1,)}


def fake_binary(path, marker):
    """A runner stand-in at ``path`` that leaves ``marker`` behind if it is ever started."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\ntouch {marker}\nexit 0\n")
    path.chmod(0o755)
    return path


def build_as_workflow(workdir, framework, version, marker):
    """The binary of ``framework`` ``version`` for the CPU where the workflow writes it,
    with the build record its build job writes (this checkout's source id for it)."""
    path = fake_binary(workdir / versions.runner_binary(framework, version, "cpu"), marker)
    identity = builds.runner_identity(CONFIG, framework, version, "cpu")
    integrity.write_binary_record(path, identity["source_id"])
    return path, identity


def copy_with_record(src, dest):
    """``src`` and its build record copied over ``dest`` and its record."""
    shutil.copy2(src, dest)
    shutil.copy2(integrity.binary_record(src), integrity.binary_record(dest))


#: (framework, the build copied in, the build the job wants): releases and backends.
SWAPS = [
    ("candle", "0.11.1", "0.11.0"),
    ("candle", "0.11.0", "0.11.1"),
    ("burn", "0.22.1+flex", "0.22.1"),
    ("burn", "0.22.1", "0.22.1+flex"),
]


@pytest.mark.parametrize(("framework", "theirs", "ours"), SWAPS)
def test_another_builds_binary_copied_in_with_its_record_is_refused_before_training(
    tmp_path, framework, theirs, ours
):
    marker = tmp_path / "started"
    their_binary, their_id = build_as_workflow(tmp_path, framework, theirs, marker)
    our_binary, our_id = build_as_workflow(tmp_path, framework, ours, marker)
    assert their_id["source_id"] != our_id["source_id"]
    # each as its build wrote it is accepted
    assert integrity.check_binary(our_binary, our_id)["source_id"] == our_id["source_id"]
    copy_with_record(their_binary, our_binary)
    key = RunKey("hand", framework, "f32", "cpu")
    out = tmp_path / "trace.parquet"
    with pytest.raises(rust_runner.RunnerError) as e:
        rust_runner.train(key, {}, "no-fixture", str(our_binary), str(out), 1, LOG, None, our_id)
    message = str(e.value)
    assert "\n" not in message
    for part in (our_id["binary"], their_id["binary"], our_id["source_id"], their_id["source_id"]):
        assert part in message, part
    assert "another build's" in message and "delete" in message
    assert not marker.exists() and not out.exists()


def test_a_record_naming_another_binary_is_refused_without_an_expected_build(tmp_path):
    """The record names the binary it was written for: a copy under another name is
    refused even by a caller that has no expected build to give."""
    marker = tmp_path / "started"
    theirs, _ = build_as_workflow(tmp_path, "candle", "0.11.1", marker)
    ours = tmp_path / versions.runner_binary("candle", "0.11.0", "cpu")
    copy_with_record(theirs, ours)
    with pytest.raises(integrity.BinaryError, match=THEIRS) as e:
        integrity.check_binary(ours)
    assert "candle-parity-0.11.0-cpu here" in str(e.value)


def test_a_build_of_other_sources_is_refused_by_its_source_id(tmp_path):
    """The record names this binary but another source id (a build of an older checkout,
    or a record re-written by hand): refused naming both ids."""
    marker = tmp_path / "started"
    path, identity = build_as_workflow(tmp_path, "candle", "0.11.0", marker)
    integrity.write_binary_record(path, "0123456789abcdef")
    with pytest.raises(integrity.BinaryError) as e:
        integrity.check_binary(path, identity)
    assert "0123456789abcdef" in str(e.value) and identity["source_id"] in str(e.value)


def own_crate(folder, body):
    """A user's crate: its manifest and a lib.rs holding ``body``."""
    (folder / "src").mkdir(parents=True)
    (folder / "Cargo.toml").write_text(f'[package]\nname = "{folder.name}"\nversion = "0.1.0"\n')
    (folder / "src" / "lib.rs").write_text(body)
    return folder


def test_two_own_ports_swapped_are_each_refused(tmp_path):
    """Two own ports of one release: one's runner (with its record, or with a record
    re-written under the other's name) copied over the other's is refused; so is a port
    whose crate changed since its runner was built."""
    marker = tmp_path / "started"
    ids = {}
    for name, body in (("a", "pub struct A;\n"), ("b", "pub struct B;\n")):
        model = {"candle": {"crate": str(own_crate(tmp_path / f"port_{name}", body))}}
        ids[name] = builds.own_identity(CONFIG, model, name, "candle", "cpu")
        path = tmp_path / "results/bin/own" / ids[name]["binary"]
        fake_binary(path, marker)
        integrity.write_binary_record(path, ids[name]["source_id"])
    assert ids["a"]["binary"] == "a-candle-cpu" and ids["a"]["source_id"] != ids["b"]["source_id"]
    a, b = (tmp_path / "results/bin/own" / ids[n]["binary"] for n in "ab")
    copy_with_record(a, b)
    key = RunKey("b", "candle", "f32", "cpu")
    with pytest.raises(rust_runner.RunnerError, match=r"a-candle-cpu.*b-candle-cpu"):
        rust_runner.train(
            key, {}, "no-fixture", str(b), str(tmp_path / "t"), 1, LOG, None, ids["b"]
        )
    integrity.write_binary_record(b, ids["a"]["source_id"])  # the name right, the build not
    with pytest.raises(integrity.BinaryError, match=ids["a"]["source_id"]):
        integrity.check_binary(b, ids["b"])
    # b's own build, then its crate edited: another source id now
    integrity.write_binary_record(b, ids["b"]["source_id"])
    assert integrity.check_binary(b, ids["b"])
    (tmp_path / "port_b" / "src" / "lib.rs").write_text("pub struct B2;\n")
    model = {"candle": {"crate": str(tmp_path / "port_b")}}
    now = builds.own_identity(CONFIG, model, "b", "candle", "cpu")
    with pytest.raises(integrity.BinaryError, match=now["source_id"]):
        integrity.check_binary(b, now)
    assert not marker.exists()


def test_the_own_source_id_does_not_depend_on_where_the_checkout_lies(tmp_path):
    """The own runner's source id hashes the runner library's files by their paths inside
    the workspace: a second clone (a remote host at the same commit) computes the same."""
    crate = own_crate(tmp_path / "port", "pub struct P;\n")
    here = builds.own_source_id("candle", crate, [], builds.RUST_DIR)
    clone = tmp_path / "clone" / "rust"
    for rel in builds.rust_files("candle-parity"):
        (clone / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(builds.RUST_DIR / rel, clone / rel)
    assert builds.own_source_id("candle", crate, [], clone) == here
    (clone / "parity-common/src/lib.rs").write_text("// changed\n")
    assert builds.own_source_id("candle", crate, [], clone) != here


def test_the_probe_batch_and_the_optimizer_defaults_refuse_another_builds_binary(tmp_path):
    marker = tmp_path / "started"
    theirs, _ = build_as_workflow(tmp_path, "candle", "0.11.1", marker)
    ours, our_id = build_as_workflow(tmp_path, "candle", "0.11.0", marker)
    copy_with_record(theirs, ours)
    batch = rust_probe.run_batch([], "candle", "f32", "cpu", str(ours), 1, LOG, None, our_id)
    with pytest.raises(rust_runner.RunnerError, match=THEIRS):
        list(batch)
    with pytest.raises(integrity.BinaryError, match=THEIRS):
        optimizer_defaults.candle_defaults(str(ours), our_id)
    with pytest.raises(rust_runner.RunnerError, match=THEIRS):
        rust_runner.run_frames(str(ours), ["replay"], {}, 1, None, None, our_id)
    assert not marker.exists()


def test_probe_results_record_their_build_and_the_probe_table_holds_them_to_it(tmp_path):
    """A probe batch records the source id of its binary's build record with each result
    (``runner.source_id``); reading a result for the probe table holds it to the source id
    this checkout and config build for the result's release and device."""
    from test_probe_batch import fake_runner
    from test_probe_batch import probes as study_probes

    config = {**CONFIG, "candle": {**CONFIG["candle"], "versions": ["0.11.0", "0.11.1"]}}
    config["probes"] = {**CONFIG.get("probes", {}), "select": ["relu_abs_at_zero"]}
    plan = ProbePlan.from_config(config, REPO, workdir=REPO)
    assert ProbePlan.from_params(plan.to_params()).source_ids == plan.source_ids
    key = ProbeKey("relu_abs_at_zero", "candle", "f32", "cpu")
    further = ProbeKey("relu_abs_at_zero", "candle", "f32", "cpu", "0.11.1")
    ours = builds.runner_identity(config, "candle", "0.11.0", "cpu")
    assert plan.source_id(key) == ours["source_id"]
    assert (
        plan.source_id(further)
        == builds.runner_identity(config, "candle", "0.11.1", "cpu")["source_id"]
    )
    assert plan.source_id(ProbeKey("relu_abs_at_zero", "torch", "f32", "cpu")) is None
    binary = fake_runner(tmp_path / versions.runner_binary("candle", "0.11.0", "cpu"))
    (probe,) = study_probes(["relu_abs_at_zero"])
    log_path = str(tmp_path / "batch.log")
    ((_, outcomes, meta),) = rust_probe.run_batch(
        [probe], "candle", "f32", "cpu", binary, 1, LOG, log_path, ours
    )
    assert meta["runner"]["source_id"] == ours["source_id"]
    out = tmp_path / "result.parquet"
    write_results(out, probe, key, outcomes, meta)
    assert read_results(out, probe, key, plan.source_id(key))[1]
    # the same result read as 0.11.1's (copied over it): another build made it
    with pytest.raises(ProbeResultError) as e:
        read_results(out, probe, further, plan.source_id(further))
    assert f"recorded runner source id {ours['source_id']!r}, expected " in str(e.value)
    assert plan.source_id(further) in str(e.value) and str(out) in str(e.value)


# ----- the plan: what each job and comparison is held to ----------------------------------


def test_the_plan_holds_each_rust_run_to_its_own_build():
    plan = Plan(HAND)
    key = lambda run: RunKey("hand", run, "f32", "cpu")  # noqa: E731
    want = {
        "candle": builds.runner_identity(HAND, "candle", "0.11.0", "cpu"),
        "candle_v0_11_1": builds.runner_identity(HAND, "candle", "0.11.1", "cpu"),
        "burn": builds.runner_identity(HAND, "burn", "0.22.1", "cpu"),
        "burn_v0_22_1_flex": builds.runner_identity(HAND, "burn", "0.22.1+flex", "cpu"),
    }
    assert len({w["source_id"] for w in want.values()}) == 4
    for run, identity in want.items():
        assert plan.build_identity(key(run)) == identity, run
        assert identity["binary"] == plan.binary(key(run)).rsplit("/", 1)[1]
        assert plan.trace_expectation(key(run))["runner_source_id"] == identity["source_id"]
    assert plan.build_identity(key("torch")) is None
    assert "runner_source_id" not in plan.trace_expectation(key("torch"))
    # the comparison and the localisation of a release's twin are held to that release
    c = plan.comparison("hand", "cpu-main_v0_11_1")
    job = plan.comparison_job(c)
    assert job["expectations"]["cand32"]["runner_source_id"] == want["candle_v0_11_1"]["source_id"]
    assert job["localise"]["builds"]["cand32"] == want["candle_v0_11_1"]
    assert job["localise"]["builds"]["ref32"] is None


# ----- the comparison: a trace another build made ---------------------------------------


def trace(path, plan, run, sha, **runner):
    """A 4-step trace of ``run`` of the plan's experiment; ``runner`` overrides its
    runner metadata (``source_id``)."""
    framework = run.split("_", 1)[0]
    meta = base_meta(
        experiment="hand",
        run=run,
        framework=framework,
        fixture_sha256=sha,
        config_hash=plan.config_hash("hand", run),
        steps=4,
        runner=runner,
    )
    if framework != "torch":
        meta["framework_version"] = plan.run_settings("hand", run)["version"]
    with TraceWriter(path, TraceLayout.of("f32", list(SHAPES.items())), meta) as w:
        for k in range(5):
            values = {n: np.full(1, 0.5 + 0.125 * k, np.float32) for n in SHAPES}
            w.write_step(k, None if k == 0 else 1.0, values)
    return str(path)


@pytest.fixture
def case(tmp_path):
    plan = Plan(HAND)
    fixture = tmp_path / "hand.safetensors"
    fixtures.save(fixture, {"x": np.array([[[-1.0], [0.5], [2.0]]], np.float32)}, {})
    return plan, str(fixture), sha256_file(fixture)


def perstep(tmp_path, plan, fixture, tag, ref, cand):
    job = plan.comparison_job(plan.comparison("hand", tag))
    out = [str(tmp_path / f"p.{e}") for e in ("csv", "md", "json")]
    return compare_jobs.perstep_job(job, ref, cand, fixture, *out, LOG)


#: (the comparison's tag, its candidate run, the build whose source id the trace records).
FOREIGN = [
    ("cpu", "candle", ("candle", "0.11.1")),
    ("cpu-main_v0_11_1", "candle_v0_11_1", ("candle", "0.11.0")),
    ("cpu-burn", "burn", ("burn", "0.22.1+flex")),
    ("cpu-burn_v0_22_1_flex", "burn_v0_22_1_flex", ("burn", "0.22.1")),
]


@pytest.mark.parametrize(("tag", "run", "made_by"), FOREIGN)
def test_a_trace_with_another_builds_runner_source_id_is_refused_by_the_comparison(
    tmp_path, case, tag, run, made_by
):
    plan, fixture, sha = case
    expected = plan.build_identity(RunKey("hand", run, "f32", "cpu"))["source_id"]
    foreign = builds.runner_identity(HAND, *made_by, "cpu")["source_id"]
    ref = trace(tmp_path / "torch.parquet", plan, "torch", sha)
    good = trace(tmp_path / "good.parquet", plan, run, sha, source_id=expected)
    assert perstep(tmp_path, plan, fixture, tag, ref, good)["verdict"] == "pass"
    bad = trace(tmp_path / "bad.parquet", plan, run, sha, source_id=foreign)
    (tmp_path / "p.json").unlink()
    with pytest.raises(TraceError) as e:
        perstep(tmp_path, plan, fixture, tag, ref, bad)
    message = str(e.value)
    assert message.startswith(
        f"{bad}: recorded runner source id {foreign!r}, expected {expected!r}"
    )
    assert "\n" not in message and "rerun" in message
    assert not (tmp_path / "p.json").exists()


def test_a_trace_without_a_runner_source_id_is_refused_by_the_comparison(tmp_path, case):
    plan, fixture, sha = case
    ref = trace(tmp_path / "torch.parquet", plan, "torch", sha)
    cand = trace(tmp_path / "candle.parquet", plan, "candle", sha, source_id=None)
    with pytest.raises(TraceError, match="recorded runner source id None, expected"):
        perstep(tmp_path, plan, fixture, "cpu", ref, cand)


# ----- the workflow: the training job refuses it before it trains ------------------------


@pytest.mark.workflow
def test_the_training_job_refuses_another_releases_binary_copied_in_with_its_record(tmp_path):
    """candle 0.11.1's binary and record copied over 0.11.0's in a workflow's results/bin:
    the 0.11.0 training job fails before it starts the binary, naming both builds, and
    writes no trace."""
    from conftest import load_test_config, record_binary, run_workflow, workflow_source_id

    workdir, marker = tmp_path / "work", tmp_path / "started"
    config = load_test_config("tiny")
    config["candle"]["versions"] = ["0.11.0", "0.11.1"]
    theirs = fake_binary(workdir / versions.runner_binary("candle", "0.11.1", "cpu"), marker)
    record_binary(theirs)  # as the build rule records it
    ours = workdir / versions.runner_binary("candle", "0.11.0", "cpu")
    copy_with_record(theirs, ours)
    trace = "results/traces/a3_sgd/candle-f32-cpu.parquet"
    proc = run_workflow(workdir, config, "--cores", "1", trace, check=False)
    assert proc.returncode != 0
    log = (workdir / "results/logs/train/a3_sgd/candle-f32-cpu.log").read_text()
    want = (
        f"{versions.runner_binary('candle', '0.11.0', 'cpu')} is another build's: its build "
        f"record is of candle-parity-0.11.1-cpu (source id {workflow_source_id(theirs)}), "
        f"this checkout and config build candle-parity-0.11.0-cpu (source id "
        f"{workflow_source_id(ours)}) here"
    )
    assert want in log, log[-3000:]
    assert not marker.exists() and not (workdir / trace).exists()


# ----- the sensitivity search, the fuzz campaign and the replay: held as the others ---------


def sensitivity_plan(run, against):
    """HAND with a sensitivity search of ``run`` against ``against``."""
    config = {
        **HAND,
        "faults": {
            "sensitivity": {
                "experiment": "hand",
                "run": run,
                "against": against,
                "log10_range": [-3, -1],
            }
        },
    }
    return Plan(config)


def test_the_sensitivity_job_gets_its_build_and_the_clean_traces_full_expectation():
    plan = sensitivity_plan("candle_v0_11_1", "burn_v0_22_1_flex")
    s = plan.sensitivity_params()
    assert s["build"] == builds.runner_identity(HAND, "candle", "0.11.1", "cpu")
    clean = RunKey("hand", "burn_v0_22_1_flex", "f32", "cpu")
    assert s["reference_expectation"] == plan.trace_expectation(clean)
    flex = builds.runner_identity(HAND, "burn", "0.22.1+flex", "cpu")["source_id"]
    assert s["reference_expectation"]["runner_source_id"] == flex
    # a PyTorch side has no build, and its clean trace no source id
    s = sensitivity_plan("torch", "torch").sensitivity_params()
    assert s["build"] is None and "runner_source_id" not in s["reference_expectation"]
    assert Plan(HAND).sensitivity_params() is None


#: The source id of a build of other sources (an older checkout's) under the right name.
STALE = "0123456789abcdef"


def test_the_sensitivity_search_refuses_another_builds_binary_before_it_runs(tmp_path, case):
    """Its perturbed runs' binary is held to the build the job is given: one of other
    sources under the right name (which its record alone accepts) is refused before it
    runs, naming both source ids."""
    from parity.detection.sensitivity import sensitivity

    _, fixture, sha = case
    plan = sensitivity_plan("candle", "torch")
    marker = tmp_path / "started"
    ours, our_id = build_as_workflow(tmp_path, "candle", "0.11.0", marker)
    integrity.write_binary_record(ours, STALE)
    assert integrity.check_binary(ours)["source_id"] == STALE
    s = plan.sensitivity_params()
    assert s["build"] == our_id
    ref = trace(tmp_path / "torch.parquet", plan, "torch", sha)
    out = [str(tmp_path / f"s.{e}") for e in ("csv", "md", "png", "svg")]
    with pytest.raises(rust_runner.RunnerError, match=STALE) as e:
        sensitivity(s, ref, fixture, str(ours), out[0], out[1], out[2:], 1, LOG)
    assert our_id["source_id"] in str(e.value) and "\n" not in str(e.value)
    assert not marker.exists() and not any(map(os.path.exists, out))


def test_the_sensitivity_search_refuses_a_clean_trace_another_build_made(tmp_path, case):
    from parity.detection.sensitivity import sensitivity

    _, fixture, sha = case
    plan = sensitivity_plan("torch", "candle")
    foreign = builds.runner_identity(HAND, "candle", "0.11.1", "cpu")["source_id"]
    ref = trace(tmp_path / "candle.parquet", plan, "candle", sha, source_id=foreign)
    out = [str(tmp_path / f"s.{e}") for e in ("csv", "md", "png", "svg")]
    with pytest.raises(TraceError, match=f"recorded runner source id {foreign!r}, expected"):
        sensitivity(plan.sensitivity_params(), ref, fixture, None, out[0], out[1], out[2:], 1, LOG)
    assert not any(map(os.path.exists, out))


def fuzz_outputs(tmp_path):
    out = {
        "csv": tmp_path / "fuzz/findings.csv",
        "md": tmp_path / "fuzz/findings.md",
        "summary": tmp_path / "fuzz/summary.json",
        "probes": tmp_path / "fuzz/probes",
        "repro": tmp_path / "fuzz/repro",
        "record": tmp_path / "fuzz/fuzz.sources.json",
    }
    return {k: str(v) for k, v in out.items()}


def test_the_fuzz_campaign_holds_each_releases_binary_to_its_build_before_it_starts(tmp_path):
    """A binary of other sources under 0.11.0's name (which its record alone accepts), or
    0.11.1's copied over it with its record: the campaign of both releases is refused
    before any case runs, naming both builds, and writes nothing; its runners hand each
    batch the build of its own release."""
    from parity.fuzz import check, job

    marker = tmp_path / "started"
    old, old_id = build_as_workflow(tmp_path, "candle", "0.11.0", marker)
    new, new_id = build_as_workflow(tmp_path, "candle", "0.11.1", marker)
    settings = {
        "seed": 0,
        "ops": ["matmul"],
        "cases_per_op": 1,
        "frameworks": ["candle"],
        "releases": {"candle": ["0.11.0", "0.11.1"]},
        "dtypes": ["f32"],
        "shrinks_per_class": 1,
    }
    outputs = fuzz_outputs(tmp_path)
    integrity.write_binary_record(old, STALE)
    with pytest.raises(rust_runner.RunnerError, match=STALE) as e:
        job.fuzz(settings, [str(old), str(new)], [], outputs, 1, LOG, builds=[old_id, new_id])
    assert old_id["source_id"] in str(e.value)
    assert not marker.exists() and not (tmp_path / "fuzz").exists()
    copy_with_record(new, old)
    with pytest.raises(rust_runner.RunnerError, match=THEIRS) as e:
        job.fuzz(settings, [str(old), str(new)], [], outputs, 1, LOG, builds=[old_id, new_id])
    assert old_id["source_id"] in str(e.value) and new_id["source_id"] in str(e.value)
    assert not marker.exists() and not (tmp_path / "fuzz").exists()
    with pytest.raises(ValueError):  # a build per binary
        job.fuzz(settings, [str(old), str(new)], [], outputs, 1, LOG, builds=[old_id])
    # each batch of the campaign is held to its own release's build
    target = check.Target("candle", "0.11.0")
    integrity.write_binary_record(old, STALE)
    runners = check.Runners({target: str(old)}, builds={target: old_id})
    with pytest.raises(rust_runner.RunnerError, match=STALE):
        runners.rust([], target, "f32")
    assert not marker.exists()


def test_the_replay_holds_the_reference_trace_to_its_build(tmp_path, case, monkeypatch):
    """The localisation's check of the retrained state against the reference trace holds
    the trace to its full expectation: a trace another build made is refused by name, not
    passed over with a note."""
    from parity.localise import replay

    plan, _, sha = case
    monkeypatch.chdir(tmp_path)
    key = RunKey("hand", "candle", "f32", "cpu")
    settings = plan.run_settings("hand", "candle")
    build = plan.build_identity(key)
    names = list(SHAPES)
    state = {n: np.full(SHAPES[n], 0.5 + 0.125 * 2, np.float32) for n in names}
    (tmp_path / key.trace).parent.mkdir(parents=True)
    trace(tmp_path / key.trace, plan, "candle", sha, source_id=build["source_id"])
    note = replay._check_against_trace(key, settings, state, names, 3, build)
    assert note == "state after step 2 equals the reference trace bit for bit"
    foreign = builds.runner_identity(HAND, "candle", "0.11.1", "cpu")["source_id"]
    trace(tmp_path / key.trace, plan, "candle", sha, source_id=foreign)
    with pytest.raises(replay.ReplayError) as e:
        replay._check_against_trace(key, settings, state, names, 3, build)
    message = str(e.value)
    assert f"recorded runner source id {foreign!r}, expected {build['source_id']!r}" in message
    assert "\n" not in message
    # a missing trace still leaves the state unchecked, with a note
    (tmp_path / key.trace).unlink()
    note = replay._check_against_trace(key, settings, state, names, 3, build)
    assert note.startswith("state not checked against the reference trace")


# ----- PyTorch: the installed release is part of a torch run ---------------------------------


def test_a_torch_upgrade_changes_the_torch_runs_hash_and_refuses_its_old_traces(
    tmp_path, case, monkeypatch
):
    """The installed torch release (its metadata's, without the local part) is a torch
    run's setting ``torch_version``: another one changes the run's hash (the training job's
    params, so Snakemake reruns it) and its expectation refuses a trace the other torch
    made, by name; the Rust runs stay as they were."""
    from parity.trace.reader import TraceReader

    plan, _, sha = case
    installed = importlib.metadata.version("torch").split("+", 1)[0]
    assert versions.torch_version() == installed
    key = RunKey("hand", "torch", "f32", "cpu")
    assert plan.run_settings("hand", "torch")["torch_version"] == installed
    assert plan.trace_expectation(key)["torch_version"] == installed
    assert "torch_version" not in plan.run_settings("hand", "candle")
    old = trace(tmp_path / "torch.parquet", plan, "torch", sha)
    TraceReader(old, expect=plan.trace_expectation(key))  # made by this torch: accepted
    monkeypatch.setattr(versions, "torch_version", lambda: "99.0.0")
    upgraded = Plan(HAND)
    assert upgraded.run_settings("hand", "torch")["torch_version"] == "99.0.0"
    assert upgraded.config_hash("hand", "torch") != plan.config_hash("hand", "torch")
    for run in ("candle", "burn", "candle_v0_11_1"):
        assert upgraded.config_hash("hand", run) == plan.config_hash("hand", run), run
    with pytest.raises(TraceError) as e:
        TraceReader(old, expect=upgraded.trace_expectation(key))
    message = str(e.value)
    assert message.startswith(f"{old}: made by torch {installed}, this environment has torch ")
    assert "99.0.0: delete the trace and rerun" in message and "\n" not in message


def test_a_torch_job_refuses_to_train_with_another_torch_than_it_was_planned_with(tmp_path):
    """A job whose torch is not the plan's (a conda environment of another release than
    the one Snakemake runs in) refuses before it trains: its trace would be refused."""
    from parity.train import torch as torch_runner

    out = tmp_path / "trace.parquet"
    with pytest.raises(RuntimeError) as e:
        torch_runner.train(
            RunKey("hand", "torch", "f32", "cpu"),
            {"torch_version": "99.0.0"},
            "x",
            str(out),
            1,
            LOG,
        )
    assert str(e.value).startswith(f"this job's torch is {versions.torch_version()}")
    assert "planned with torch 99.0.0" in str(e.value) and not out.exists()


def test_the_torch_version_leaves_out_the_local_part(monkeypatch):
    versions.torch_version.cache_clear()
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "2.5.1+cu121")
    try:
        assert versions.torch_version() == "2.5.1"
    finally:
        versions.torch_version.cache_clear()
