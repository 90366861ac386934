"""Corruption is detected by every reader: traces and probe results (page checksums and the
sealed footer metadata), fixtures, JSON results, tables a later job reads; and the lock
around the tables over many results."""

import json
import multiprocessing
import time

import numpy as np
import pytest

from parity.core import fileio, integrity, paths
from parity.probe.loader import load
from parity.probe.plan import ProbeKey
from parity.probe.results import Outcome, ProbeResultError, read_results, write_results
from parity.report import partial
from parity.trace import fixtures
from parity.trace.reader import TraceReader
from parity.trace.schema import TraceError
from test_probes import CONV1D, write_probe

from conftest import write_trace


def small_trace(tmp_path):
    rng = np.random.default_rng(0)
    steps = [{"fc1.weight": rng.standard_normal(6), "fc1.bias": rng.standard_normal(3)}] * 4
    return write_trace(
        tmp_path / "t.parquet", steps, shapes={"fc1.weight": (3, 2), "fc1.bias": (3,)}
    )


def trace_content(path):
    r = TraceReader(path)
    steps = [
        (s.step, s.loss, {k: v.tobytes() for k, v in s.tensors.items()}) for s in r.iter_steps()
    ]
    return json.dumps(r.meta, sort_keys=True), steps


def flips(data: bytes, stride: int):
    """Copies of ``data`` with one bit flipped, at every ``stride``-th byte, cycling the
    bit, and at every byte of the last 8 (footer length and magic)."""
    positions = [*range(0, len(data), stride), *range(len(data) - 8, len(data))]
    for i in sorted(set(positions)):
        b = bytearray(data)
        b[i] ^= 1 << (i % 8)
        yield i, bytes(b)


def test_no_single_bit_flip_in_a_trace_changes_what_is_read_unnoticed(tmp_path):
    """Measured exhaustively (every bit of every byte) on this trace while writing it: each
    flip is refused as a TraceError or changes nothing a reader returns; here every 3rd
    byte, which keeps it quick."""
    path = small_trace(tmp_path)
    original, want = path.read_bytes(), trace_content(path)
    flipped = tmp_path / "flipped.parquet"
    outcomes = {"refused": 0, "harmless": 0}
    for i, data in flips(original, 3):
        flipped.write_bytes(data)
        try:
            got = trace_content(flipped)
        except TraceError:
            outcomes["refused"] += 1
            continue
        assert got == want, f"a flipped bit at byte {i} changed the trace unnoticed"
        outcomes["harmless"] += 1
    assert outcomes["refused"] > outcomes["harmless"] > 0


def test_a_flip_in_the_values_is_refused_by_its_page_checksum(tmp_path):
    path = small_trace(tmp_path)
    offset, size = TraceReader(path).byte_range(0)
    middle = offset + size // 2
    data = bytearray(path.read_bytes())
    data[middle] ^= 0x10
    path.write_bytes(bytes(data))
    reader = TraceReader(path)  # the footer is intact
    with pytest.raises(TraceError, match=r"t\.parquet: corrupt: .*CRC checksum verification"):
        list(reader.iter_steps())


def test_altered_trace_metadata_is_refused(tmp_path):
    path = small_trace(tmp_path)
    data = path.read_bytes()
    # An edit that keeps the JSON valid and the length: only the seal can tell.
    path.write_bytes(data.replace(b'"host": "testhost"', b'"host": "otherhos"', 1))
    assert path.read_bytes() != data
    with pytest.raises(TraceError, match="does not match its sha256: the file is corrupt"):
        TraceReader(path)


def probe_result(tmp_path):
    probe = load(write_probe(tmp_path, "conv", CONV1D))
    key = ProbeKey("conv", "torch", "f32", "cpu")
    outcomes = [
        Outcome.ok("batch2", "loss", np.float32(-84.0), ()),
        Outcome.ok("batch2", "w.grad", np.arange(6, dtype=np.float32), (2, 1, 3)),
    ]
    path = tmp_path / "r.parquet"
    write_results(path, probe, key, outcomes, {"framework_version": "t", "host": "h", "runner": {}})
    return path, probe, key


def test_no_single_bit_flip_in_a_probe_result_changes_it_unnoticed(tmp_path):
    path, probe, key = probe_result(tmp_path)
    original = path.read_bytes()
    want = read_results(path, probe, key)
    flipped = tmp_path / "flipped.parquet"
    refused = 0
    for i, data in flips(original, 5):
        flipped.write_bytes(data)
        try:
            got = read_results(flipped, probe, key)
        except ProbeResultError:
            refused += 1
            continue
        assert got[0] == want[0], f"byte {i}"
        for q, o in got[1].items():
            w = want[1][q]
            assert (o.status, o.shape, o.message) == (w.status, w.shape, w.message), f"byte {i}"
            assert np.array_equal(o.values, w.values), f"a flipped bit at byte {i}"
    assert refused > 0


def test_a_corrupt_fixture_is_refused(tmp_path):
    settings = {
        "model": {"family": "mlp", "sizes": [2, 3], "activation": "relu"},
        "loss": "mse",
        "data": {"seed": 1, "batches": 1, "batch_size": 4},
    }
    path = tmp_path / "f.safetensors"
    drawn = fixtures.write(path, settings)
    assert all(np.array_equal(fixtures.load(path)[k], drawn[k]) for k in drawn)
    data = bytearray(path.read_bytes())
    data[-3] ^= 0x01  # inside the last tensor's bytes
    path.write_bytes(bytes(data))
    with pytest.raises(fixtures.FixtureError, match="do not match the sha256 recorded"):
        fixtures.load(path)
    path.write_bytes(bytes(data[:100]))
    with pytest.raises(fixtures.FixtureError, match="not a readable safetensors file"):
        fixtures.load(path)


def test_sealed_json_refuses_any_change(tmp_path):
    path = tmp_path / "r.json"
    integrity.write_sealed_json(path, {"verdict": "pass", "worst": 1.5e-7})
    assert integrity.read_sealed_json(path) == {"verdict": "pass", "worst": 1.5e-7}
    path.write_text(path.read_text().replace("pass", "fail"))
    with pytest.raises(integrity.IntegrityError, match="do not match their sha256"):
        integrity.read_sealed_json(path)
    path.write_text('{"verdict": "pass"}')
    with pytest.raises(integrity.IntegrityError, match="no sha256 seal"):
        integrity.read_sealed_json(path)


def test_a_table_is_checked_against_the_digest_its_job_recorded(tmp_path):
    table = tmp_path / "t.csv"
    table.write_text("a\n1\n")
    record = integrity.file_record(table)
    integrity.check_file(table, record["sha256"], "r.json")
    assert integrity.changed({"t": record}) == []
    table.write_text("a\n2\n")
    with pytest.raises(integrity.IntegrityError, match=r"that r\.json recorded"):
        integrity.check_file(table, record["sha256"], "r.json")
    assert integrity.changed({"t": record}) == [f"{table} changed since"]
    table.unlink()
    assert integrity.changed({"t": record}) == [f"{table} is gone"]


def _hold(path, seconds, ready):
    with fileio.exclusive_lock(path):
        ready.set()
        time.sleep(seconds)


def test_the_tables_lock_keeps_a_second_writer_out(tmp_path, monkeypatch):
    """Two runs in one folder (the Snakemake lock allows disjoint targets) may both end in
    onerror: the second one leaves the summary to the first."""
    monkeypatch.chdir(tmp_path)
    ready = multiprocessing.Event()
    holder = multiprocessing.Process(target=_hold, args=(paths.TABLES_LOCK, 5, ready))
    holder.start()
    try:
        assert ready.wait(30)
        with (
            pytest.raises(fileio.LockHeld, match="held by another run"),
            fileio.exclusive_lock(paths.TABLES_LOCK, timeout=0.2),
        ):
            pass
        monkeypatch.setattr(partial, "ONERROR_WAIT", 0.2)
        line = partial.after_failed_run([], [], {})
        assert "could not be written" in line and "held by another run" in line
    finally:
        holder.join()
    with fileio.exclusive_lock(paths.TABLES_LOCK, timeout=1):
        pass


# ----- runner binaries ---------------------------------------------------------------


def _binary(tmp_path, text="#!/bin/sh\necho abc\n"):
    b = tmp_path / "runner"
    b.write_text(text)
    b.chmod(0o755)
    return b


def test_a_binary_its_build_recorded_passes_the_check(tmp_path):
    b = _binary(tmp_path)
    rec = integrity.write_binary_record(b, "abc")
    assert integrity.check_binary(b) == rec and rec["source_id"] == "abc"


def test_a_binary_replaced_after_its_build_is_refused_by_name(tmp_path):
    """A wrapper script put in its place (or another release's binary with the old time):
    its sha256 is not the one its build recorded."""
    b = _binary(tmp_path)
    integrity.write_binary_record(b, "abc")
    b.write_text('#!/bin/sh\nexec /bin/true "$@"\n')
    with pytest.raises(integrity.BinaryError) as e:
        integrity.check_binary(b)
    assert f"{b} is not the binary its build wrote" in str(e.value)
    assert f"delete {b} and rerun" in str(e.value)


def test_a_binary_without_a_build_record_is_refused(tmp_path):
    b = _binary(tmp_path)
    with pytest.raises(integrity.BinaryError, match="has no build record"):
        integrity.check_binary(b)


def test_the_rust_wrapper_refuses_to_start_a_binary_that_is_not_its_build(tmp_path):
    import logging

    from parity.plan.keys import RunKey
    from parity.plan.plan import Plan
    from parity.trace import fixtures
    from parity.train import rust as rust_runner

    from conftest import load_config

    plan = Plan(load_config())
    s = plan.run_settings("a3_sgd", "candle")
    fx = tmp_path / "fx.safetensors"
    fixtures.write(fx, plan.fixture_settings("a3_sgd"))
    b = _binary(tmp_path)
    with pytest.raises(rust_runner.RunnerError, match="has no build record"):
        rust_runner.train(
            RunKey("a3_sgd", "candle", "f32", "cpu"),
            s,
            str(fx),
            str(b),
            str(tmp_path / "t"),
            1,
            logging.getLogger("t"),
            None,
        )
    assert not (tmp_path / "t").exists()


def test_every_folder_of_results_is_read_by_people_or_machine_data():
    """check names every file a person reads that no record covers (``sealed.unverified``),
    walking the folders people read; a folder the workflow writes that is in neither list
    would be skipped in silence. Every ``results/<folder>`` the paths, the rules and the
    Snakefile name is one of the two, and no folder is both."""
    import re
    from pathlib import Path

    from parity.report import sealed

    repo = Path(__file__).resolve().parents[1]
    sources = [repo / "Snakefile", *repo.glob("rules/**/*.smk"), *repo.glob("scripts/**/*.py")]
    named = set()
    for f in sources:
        named |= set(re.findall(r"results/([a-z_]+)/", f.read_text(encoding="utf-8")))
    read = {p.removeprefix("results/") for p in sealed.READ_DIRS}
    machine = {p.removeprefix("results/") for p in sealed.MACHINE_DIRS}
    assert not read & machine
    assert named - read - machine == set()
    assert "fuzz" in read and "traces" in machine
