"""Probe batches (parity.probe.batch, parity.probe.rust.run_batch): one job per (framework,
dtype, device), a content cache so a rerun recomputes only the probes that changed, the
Rust runners' batch frame stream, and the batch jobs in the workflow's DAG."""

import copy
import logging
import os
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from safetensors.numpy import save

from parity.core import paths
from parity.plan import versions
from parity.probe import batch as probe_batch
from parity.probe import rust as rust_probe
from parity.probe.format import Probe
from parity.probe.loader import load
from parity.probe.plan import ProbePlan
from parity.probe.results import Outcome, ProbeResultError, read_results
from parity.trace.frames import Frame, read_frames
from parity.train.rust import RunnerError

from conftest import REPO, load_test_config, record_binary, run_workflow, workflow_source_id

LOG = logging.getLogger("test")
NAMES = ["conv1d_grad", "conv2d_grad", "relu_abs_at_zero"]
BATCH = probe_batch.Batch("candle", "f32", "cpu")
IDENT = {"code": "abc", "threads": 1, "binary": "0" * 64}


def probes(names=NAMES):
    return [load(REPO / "probes" / f"{n}.yaml") for n in names]


def changed(probe: Probe) -> Probe:
    """The probe with another tolerance: another normalized probe, another hash."""
    spec = copy.deepcopy(probe.spec)
    spec["tolerance"]["f32"] = spec["tolerance"]["f32"] + 1e-3
    return Probe(probe.name, spec, probe.path)


def metadata():
    return {"framework_version": "0.0-test", "host": "test", "runner": {"threads": 1}}


#: The value of every fake outcome: its bytes are easy to find in a result file.
VALUE = 1234.5678


def outcomes(probe: Probe, value: float = VALUE) -> list[Outcome]:
    return [Outcome.ok(c, q, [value], [1]) for c, q in probe.quantities()]


class FakeCompute:
    """A framework's ``compute``: records which probes it was asked to run."""

    def __init__(self, fail_after=None):
        self.calls = []
        self.fail_after = fail_after

    def __call__(self, todo):
        self.calls.append([p.name for p in todo])
        for i, p in enumerate(todo):
            if self.fail_after is not None and i == self.fail_after:
                raise RuntimeError("the framework crashed")
            yield p.name, outcomes(p), metadata()


@pytest.fixture
def work(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


def run(ps, compute, ident=IDENT, batch=BATCH):
    outputs = {p.name: batch.key(p.name).result for p in ps}
    return probe_batch.run_batch(ps, batch, outputs, ident, compute, LOG)


def cache_folder(batch=BATCH) -> Path:
    return probe_batch.cache_path(batch.key("x"), "y").parent


def entries(batch=BATCH) -> list[str]:
    """The names of the batch's cache entries, sorted."""
    return sorted(p.name for p in cache_folder(batch).glob("*.parquet"))


# ----- the plan ------------------------------------------------------------------------


def test_batches_group_the_jobs_by_framework_dtype_and_device():
    plan = ProbePlan({p.name: p for p in probes()}, ["cpu", "metal"], ["f32", "f64"])
    batches = plan.batches()
    # burn: CPU only; float64 on Metal: none.
    assert sorted(batches) == sorted(
        [(fw, dt, "cpu") for fw in ("torch", "candle", "burn") for dt in ("f32", "f64")]
        + [("torch", "f32", "metal"), ("candle", "f32", "metal")]
    )
    for (fw, dt, dev), keys in batches.items():
        assert [k.probe for k in keys] == NAMES
        assert {(k.framework, k.dtype, k.device) for k in keys} == {(fw, dt, dev)}
    assert sorted(k for ks in batches.values() for k in ks) == sorted(plan.jobs())


# ----- the cache -----------------------------------------------------------------------


def test_the_cache_key_covers_the_probe_the_cell_and_the_interpreter():
    p = probes(["conv1d_grad"])[0]
    key = BATCH.key(p.name)
    base = probe_batch.cache_key(p, key, IDENT)
    assert base == probe_batch.cache_key(
        Probe(p.name, copy.deepcopy(p.spec), "elsewhere"), key, IDENT
    )
    others = {
        probe_batch.cache_key(changed(p), key, IDENT),
        probe_batch.cache_key(p, probe_batch.Batch("candle", "f64", "cpu").key(p.name), IDENT),
        probe_batch.cache_key(p, probe_batch.Batch("burn", "f32", "cpu").key(p.name), IDENT),
        probe_batch.cache_key(p, key, {**IDENT, "code": "abd"}),
        probe_batch.cache_key(p, key, {**IDENT, "binary": "1" * 64}),
        probe_batch.cache_key(p, key, {**IDENT, "threads": 2}),
    }
    assert base not in others and len(others) == 6


def test_the_first_run_computes_every_probe_in_one_call_and_fills_the_cache(work):
    ps = probes()
    compute = FakeCompute()
    done = run(ps, compute)
    assert compute.calls == [NAMES]
    assert (done.cached, done.computed) == ([], NAMES)
    for p in ps:
        key = BATCH.key(p.name)
        meta, rows = read_results(key.result, p, key)
        assert meta["framework_version"] == "0.0-test"
        assert meta[probe_batch.CACHE_KEY_FIELD] == probe_batch.cache_key(p, key, IDENT)
        assert all(o.values.tolist() == [VALUE] for o in rows.values())
    assert [e.split("-")[0] for e in entries()] == NAMES


def test_a_rerun_takes_every_probe_from_the_cache(work):
    ps = probes()
    run(ps, FakeCompute())
    before = {p.name: Path(BATCH.key(p.name).result).read_bytes() for p in ps}
    for p in ps:
        os.unlink(BATCH.key(p.name).result)  # Snakemake removes a job's outputs first
    compute = FakeCompute()
    done = run(ps, compute)
    assert compute.calls == []
    assert (done.cached, done.computed) == (NAMES, [])
    assert {p.name: Path(BATCH.key(p.name).result).read_bytes() for p in ps} == before


def test_a_changed_probe_is_the_only_one_recomputed_and_replaces_its_entry(work):
    ps = probes()
    run(ps, FakeCompute())
    old = entries()
    ps[1] = changed(ps[1])
    compute = FakeCompute()
    done = run(ps, compute)
    assert compute.calls == [["conv2d_grad"]]
    assert (done.cached, done.computed) == (["conv1d_grad", "relu_abs_at_zero"], ["conv2d_grad"])
    new = entries()
    assert len(new) == 3 and new[0] == old[0] and new[2] == old[2] and new[1] != old[1]
    key = BATCH.key("conv2d_grad")
    assert read_results(key.result, ps[1], key)[0]["probe_hash"] == ps[1].hash


def test_a_changed_interpreter_recomputes_every_probe(work):
    ps = probes()
    run(ps, FakeCompute())
    compute = FakeCompute()
    run(ps, compute, ident={**IDENT, "binary": "1" * 64})
    assert compute.calls == [NAMES]


def corrupt_flip(path):
    # One bit of a stored value (a page whose CRC-32 then fails).
    data = bytearray(path.read_bytes())
    at = data.index(struct.pack("<d", VALUE))
    data[at] ^= 0x01
    path.write_bytes(bytes(data))


def corrupt_truncate(path):
    path.write_bytes(path.read_bytes()[:100])


def corrupt_other_cell(path):
    # A valid result, but of another cell (the f64 run) stored under this key.
    p = load(REPO / "probes" / f"{path.name.split('-')[0]}.yaml")
    from parity.probe.results import write_results

    write_results(path, p, probe_batch.Batch("candle", "f64", "cpu").key(p.name),
                  outcomes(p), metadata())  # fmt: skip


def corrupt_other_code(path):
    # A valid result of this very cell, made by other code (another cache key).
    p = load(REPO / "probes" / f"{path.name.split('-')[0]}.yaml")
    from parity.probe.results import write_results

    meta = {**metadata(), probe_batch.CACHE_KEY_FIELD: "0" * 16}
    write_results(path, p, BATCH.key(p.name), outcomes(p), meta)


@pytest.mark.parametrize(
    "corrupt", [corrupt_flip, corrupt_truncate, corrupt_other_cell, corrupt_other_code]
)
def test_a_corrupt_cache_entry_is_ignored_and_recomputed(work, corrupt, caplog):
    ps = probes()
    run(ps, FakeCompute())
    entry = cache_folder() / next(e for e in entries() if e.startswith("conv2d_grad-"))
    corrupt(entry)
    compute = FakeCompute()
    with caplog.at_level(logging.WARNING, logger="test"):
        done = run(ps, compute)
    assert compute.calls == [["conv2d_grad"]]
    assert done.computed == ["conv2d_grad"]
    assert "conv2d_grad: ignoring its cache entry" in caplog.text
    read_results(entry, ps[1], BATCH.key("conv2d_grad"))  # rewritten, valid


def test_a_failing_batch_writes_no_output_but_keeps_what_it_computed(work):
    ps = probes()
    with pytest.raises(RuntimeError, match="crashed"):
        run(ps, FakeCompute(fail_after=2))
    assert not any(Path(BATCH.key(p.name).result).exists() for p in ps)
    assert len(entries()) == 2
    compute = FakeCompute()
    run(ps, compute)
    assert compute.calls == [["relu_abs_at_zero"]]


def test_a_compute_that_misses_or_invents_probes_is_refused(work):
    ps = probes()

    def short(todo):
        yield todo[0].name, outcomes(todo[0]), metadata()

    with pytest.raises(probe_batch.BatchError, match="no result for probe"):
        run(ps, short)

    def invent(todo):
        yield "other", [], metadata()

    with pytest.raises(probe_batch.BatchError, match="not asked for"):
        run(ps, invent)

    def wrong_rows(todo):
        for p in todo:
            yield p.name, outcomes(p)[:1], metadata()

    with pytest.raises(ProbeResultError, match="missing"):
        run(probes(["conv2d_grad"]), wrong_rows)  # conv1d_grad is cached by now
    assert not any(Path(BATCH.key(p.name).result).exists() for p in ps)


def test_job_outputs_must_be_the_probes_results():
    ps = probes()
    out = [BATCH.key(p.name).result for p in reversed(ps)]
    assert probe_batch.job_outputs(ps, BATCH, out) == {p.name: BATCH.key(p.name).result for p in ps}
    with pytest.raises(probe_batch.BatchError):
        probe_batch.job_outputs(ps, BATCH, out[:2])


# ----- the Rust runners' batch stream --------------------------------------------------


def frame(meta, tensors=None):
    body = save(tensors or {}, metadata=meta)
    return struct.pack("<Q", len(body)) + body


HEADER = {
    "kind": "header",
    "framework": "candle",
    "framework_version": "0.11.0",
    "compiler": "rustc",
    "device_detail": "cpu",
    "features": "",
    "threads": "1",
}


def stream(ps, order=None, probe_field=True):
    """A runner's frames for ``ps`` (every quantity ok, values [k] with shape [1])."""
    data = frame(HEADER)
    for p in order or ps:
        for k, (c, q) in enumerate(p.quantities()):
            meta = {"kind": "result", "case": c, "quantity": q, "status": "ok", "message": ""}
            if probe_field:
                meta["probe"] = p.name
            data += frame(meta, {"values": np.array([float(k)])})
    return data + frame({"kind": "end"})


def frames(data) -> list[Frame]:
    import io

    return list(read_frames(io.BytesIO(data)))


def test_batch_frames_are_split_by_probe():
    ps = probes()
    data = stream(ps)
    meta, by_probe = rust_probe.batch_outcomes(frames(data), ps, "candle", "candle-parity")
    assert list(by_probe) == NAMES
    assert meta["framework_version"] == "0.11.0" and meta["runner"]["threads"] == 1
    for p in ps:
        assert [(o.case, o.quantity) for o in by_probe[p.name]] == p.quantities()
        assert [float(o.values[0]) for o in by_probe[p.name]] == [
            float(k) for k in range(len(p.quantities()))
        ]


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (lambda ps: stream(ps, probe_field=False), "names no probe"),
        (lambda ps: stream(ps, order=[ps[1], ps[0], ps[2]]), "out of batch order"),
        (lambda ps: stream(ps[:2]), "no result for probe.*relu_abs_at_zero"),
        (lambda ps: stream(ps + probes(["bce_with_logits"])), "not in the batch"),
        (lambda ps: stream(ps)[: -len(frame({"kind": "end"}))], "header or end frame"),
        (lambda ps: stream(ps).replace(b'"candle"', b'"burn"  ', 1), "reports framework"),
    ],
)
def test_a_malformed_batch_stream_is_refused(data, problem):
    ps = probes()
    with pytest.raises(RunnerError, match=problem):
        rust_probe.batch_outcomes(frames(data(ps)), ps, "candle", "candle-parity")


def test_interleaved_probe_results_are_refused():
    ps = probes(["conv1d_grad", "conv2d_grad"])
    data = stream(ps)
    fs = frames(data)
    # Move conv1d_grad's last result after conv2d_grad's first.
    n = len(ps[0].quantities())
    fs[n], fs[n + 1] = fs[n + 1], fs[n]
    with pytest.raises(RunnerError, match="out of batch order"):
        rust_probe.batch_outcomes(fs, ps, "candle", "candle-parity")


FAKE_RUNNER = r"""#!{python}
# A stand-in for candle-parity/burn-parity's `probe` subcommand: reads the ProbeBatch,
# writes one ok result per quantity (value: the quantity's index) and says on stderr which
# probes it was given.
import json, os, struct, sys
import numpy as np
from safetensors.numpy import save

def frame(meta, tensors=None):
    body = save(tensors or {{}}, metadata=meta)
    sys.stdout.buffer.write(struct.pack("<Q", len(body)) + body)

framework = sys.argv[0].rsplit("/", 1)[-1].split("-")[0]
args = sys.argv[1:]
assert args[0] == "probe", args
spec = json.load(open(args[args.index("--spec") + 1]))
if "probes" not in spec:
    print("fake runner: not a ProbeBatch", file=sys.stderr)
    sys.exit(2)
print("fake runner probes: " + ",".join(p["probe"] for p in spec["probes"]), file=sys.stderr)
frame({{"kind": "header", "framework": framework, "framework_version": "fake",
        "compiler": "none", "device_detail": "cpu", "features": "", "threads": "1"}})
crash_after = int(os.environ.get("FAKE_CRASH_AFTER", "-1"))
segfault_in = os.environ.get("FAKE_SEGFAULT_IN")
for i, p in enumerate(spec["probes"]):
    if i == crash_after:  # die part-way, in the middle of a frame
        sys.stdout.buffer.write(struct.pack("<Q", 1000) + b"partial")
        sys.stdout.flush()
        print("fake runner: crashed", file=sys.stderr)
        sys.exit(3)
    for case in p["cases"]:
        for k, q in enumerate(case["compare"]):
            if p["probe"] == segfault_in and k == 1:  # a signal after the first quantity
                sys.stdout.flush()
                os.kill(os.getpid(), 11)
            frame({{"kind": "result", "probe": p["probe"], "case": case["name"],
                    "quantity": q, "status": "ok", "message": ""}},
                  {{"values": np.array([float(k)])}})
frame({{"kind": "end"}})
"""


def fake_runner(path: Path) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(FAKE_RUNNER.format(python=sys.executable))
    path.chmod(0o755)
    record_binary(path, workflow_source_id(path) or "fake")  # a job holds it to the checkout's
    return str(path)


def test_a_runner_batch_runs_once_on_the_probes_not_cached(work):
    binary = fake_runner(work / "bin" / "candle-parity")
    log_path = work / "batch.log"
    ps = probes()

    def compute(todo):
        return rust_probe.run_batch(todo, "candle", "f32", "cpu", binary, 1, LOG, str(log_path))

    run(ps, compute)
    ps[2] = changed(ps[2])
    run(ps, compute)
    lines = [x for x in log_path.read_text().splitlines() if x.startswith("fake runner probes")]
    assert lines == [
        f"fake runner probes: {','.join(NAMES)}",
        "fake runner probes: relu_abs_at_zero",
    ]
    key = BATCH.key("relu_abs_at_zero")
    _, rows = read_results(key.result, ps[2], key)
    assert [float(o.values[0]) for o in rows.values()] == [0.0, 1.0, 0.0, 1.0]


def test_a_dead_runners_stream_yields_only_its_complete_probes():
    ps = probes()
    fs = frames(stream(ps))[:-1]  # no end frame
    n0, n1 = len(ps[0].quantities()), len(ps[1].quantities())
    # The second probe's last quantity is missing: only the first counts.
    meta, done = rust_probe.complete_probes(fs[: 1 + n0 + n1 - 1], ps, "candle", "c")
    assert list(done) == ["conv1d_grad"] and meta["framework_version"] == "0.11.0"
    meta, done = rust_probe.complete_probes(fs[: 1 + n0 + n1], ps, "candle", "c")
    assert list(done) == ["conv1d_grad", "conv2d_grad"]
    assert rust_probe.complete_probes(fs[:1], ps, "candle", "c") == ({}, {})
    assert rust_probe.complete_probes(fs, ps, "burn", "c") == ({}, {})


def test_a_runner_that_dies_part_way_keeps_the_probes_it_finished(work, monkeypatch):
    binary = fake_runner(work / "bin" / "candle-parity")
    log_path = work / "batch.log"
    ps = probes()

    def compute(todo):
        return rust_probe.run_batch(todo, "candle", "f32", "cpu", binary, 1, LOG, str(log_path))

    monkeypatch.setenv("FAKE_CRASH_AFTER", "2")
    with pytest.raises(RunnerError, match=r"status 3 \(2 probe\(s\) before it kept\)"):
        run(ps, compute)
    assert not any(Path(BATCH.key(p.name).result).exists() for p in ps)
    assert len(entries()) == 2
    monkeypatch.setenv("FAKE_CRASH_AFTER", "0")
    with pytest.raises(RunnerError, match=r"status 3; last lines of its log:\n(.|\n)*crashed"):
        run(ps, compute)
    monkeypatch.delenv("FAKE_CRASH_AFTER")
    done = run(ps, compute)
    assert (done.cached, done.computed) == (NAMES[:2], NAMES[2:])


def test_a_probe_that_crashes_the_runner_costs_only_itself(work, monkeypatch):
    """A runner killed by a signal in the middle of one probe: the probes before it keep
    their results, its quantities that arrived stay, the rest are framework errors naming
    the crash, and the probes after it run in a second invocation."""
    binary = fake_runner(work / "bin" / "candle-parity")
    log_path = work / "batch.log"
    ps = probes()
    monkeypatch.setenv("FAKE_SEGFAULT_IN", NAMES[1])
    got = list(rust_probe.run_batch(ps, "candle", "f32", "cpu", binary, 1, LOG, str(log_path)))
    assert [name for name, _, _ in got] == NAMES
    crashed = got[1][1]
    assert crashed[0].status == "ok"
    assert {o.status for o in crashed[1:]} == {"framework-error"}
    assert crashed[1].message == "candle-parity crashed (SIGSEGV) while running this probe"
    assert all(o.status == "ok" for o in got[0][1] + got[2][1])
    lines = [x for x in log_path.read_text().splitlines() if x.startswith("fake runner probes")]
    assert lines == [f"fake runner probes: {','.join(NAMES)}", f"fake runner probes: {NAMES[2]}"]


@pytest.mark.parametrize("crate", ["candle-parity", "burn-parity"])
def test_the_real_runner_answers_a_batch(crate, request, tmp_path):
    """The real binaries on a batch of three probes."""
    binary = request.getfixturevalue(f"{crate.split('-')[0]}_binary")
    framework = crate.split("-")[0]
    ps = probes()
    log_path = tmp_path / "runner.log"
    got = list(rust_probe.run_batch(ps, framework, "f32", "cpu", binary, 1, LOG, str(log_path)))
    assert [name for name, _, _ in got] == NAMES
    for p, (_, outs, _) in zip(ps, got, strict=True):
        assert [(o.case, o.quantity) for o in outs] == p.quantities()
    conv = dict(((o.case, o.quantity), o) for o in got[0][1])
    assert conv[("batch1", "w.grad")].values.tolist() == [20, 30, 40, 44, 70, 96]


# ----- the workflow ----------------------------------------------------------------------


def batch_config(folder: Path) -> dict:
    config = load_test_config("probes")
    # Every probe dtype (f16 and bf16 too): one batch per framework and dtype.
    config["probes"].update(folder=str(folder), select=None, dtypes=["f32", "f64", "f16", "bf16"])
    config["devices"] = ["cpu"]
    config["dtypes"] = ["f32", "f64"]
    config["candle"]["versions"] = ["0.11.0"]  # the release axis: test_versions.py
    config["burn"]["versions"] = ["0.22.1"]
    return config


def copy_probes(folder: Path, names=NAMES):
    folder.mkdir(parents=True, exist_ok=True)
    for n in names:
        (folder / f"{n}.yaml").write_text((REPO / "probes" / f"{n}.yaml").read_text())


def job_counts(stdout: str) -> dict[str, int]:
    counts = {}
    for line in stdout.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            counts[parts[0]] = int(parts[1])
    return counts


def test_the_dag_has_one_job_per_batch(tmp_path):
    copy_probes(tmp_path / "probes")
    config = batch_config(tmp_path / "probes")
    proc = run_workflow(tmp_path / "work", config, "--quiet", "rules", "-n", "--cores", "1",
                        "results/tables/probes.csv")  # fmt: skip
    counts = job_counts(proc.stdout)
    # One batch per dtype: f32, f64, f16, bf16 (burn's ndarray backend: f32 and f64 only).
    assert counts["probe_torch"] == counts["probe_candle"] == 4
    assert counts["probe_burn"] == 2
    assert counts["probes_table"] == 1


def test_a_changed_probe_reruns_its_batches_and_only_it_is_recomputed(tmp_path):
    """Real PyTorch batches and stand-in Rust runners (results/bin, as the build rules
    would leave them): one job per batch; after one probe file changes, every batch reruns
    and its log says that only that probe was computed."""
    folder, work = tmp_path / "probes", tmp_path / "work"
    copy_probes(folder)
    for fw in ("candle", "burn"):
        fake_runner(
            work
            / paths.RUNNER_BINARY.format(framework=fw, version=versions.pinned(fw), device="cpu")
        )
    config = batch_config(folder)
    targets = [
        paths.PROBE_RESULT.format(probe=n, framework=fw, dtype=dt, device="cpu")
        for n in NAMES
        for fw in ("torch", "candle", "burn")
        for dt in ("f32", "f64")
    ]
    run_workflow(work, config, "--cores", "2", *targets)
    logs = {
        (fw, dt): work / paths.PROBE_LOG.format(framework=fw, dtype=dt, device="cpu")
        for fw in ("torch", "candle", "burn")
        for dt in ("f32", "f64")
    }
    for fw_dt, log in logs.items():
        assert f"computing probes: {', '.join(NAMES)}" in log.read_text(), fw_dt
    for log in logs.values():
        log.unlink()
    doc = yaml.safe_load((folder / "conv2d_grad.yaml").read_text())
    doc["tolerance"] = {"f32": 1e-5, "f64": 1e-12}
    (folder / "conv2d_grad.yaml").write_text(yaml.safe_dump(doc))
    proc = run_workflow(work, config, "--cores", "2", *targets)
    assert job_counts(proc.stdout).get("probe_torch") == 2, proc.stdout[-3000:]
    for fw_dt, log in logs.items():
        text = log.read_text()
        assert "computing probes: conv2d_grad\n" in text, (fw_dt, text)
        assert "cached probes: conv1d_grad, relu_abs_at_zero\n" in text, (fw_dt, text)
    runner_log = logs[("candle", "f32")].read_text()
    assert "fake runner probes: conv2d_grad\n" in runner_log
    # Every result is current and the rerun is a no-op.
    again = run_workflow(work, config, "--cores", "1", *targets)
    assert "Nothing to be done" in again.stdout
    key = probe_batch.Batch("torch", "f32", "cpu").key("conv1d_grad")
    _, rows = read_results(work / key.result, load(folder / "conv1d_grad.yaml"), key)
    assert rows[("batch1", "w.grad")].values.tolist() == [20, 30, 40, 44, 70, 96]


@pytest.mark.workflow
def test_the_probe_benchmark_measures_a_fresh_run_and_a_partial_rerun():
    """bench/probes.py (PyTorch only, float32: the cheapest real run): the probe files of
    probes/ and 30 variants in a new temp folder each time, every batch computed on the
    first run, nothing on a touch, and only the edited probe recomputed after an edit."""
    proc = subprocess.run(
        [sys.executable, str(REPO / "bench/probes.py"), "--frameworks", "torch", "--dtypes", "f32"],
        capture_output=True,
        text=True,
        timeout=900,
        check=True,
    )
    out = proc.stdout
    files = len(list((REPO / "probes").glob("*.yaml"))) + 30
    assert f"{files} probe files × torch × f32 (cpu)" in out
    assert "first run: " in out and "jobs: probe_torch 1" in out
    assert "bce_with_logits.yaml touched: rerun" in out and "jobs: nothing" in out
    edited = out.split("bce_with_logits.yaml edited:")[1]
    assert "| torch-f32-cpu | bce_with_logits |" in edited
