"""Atomic writes: every output gets the mode the umask gives a new file, whoever writes it
(tables, traces, probe results, fixtures, figures, a copied binary keeps its execute bit)."""

import os
import shutil
import stat

import numpy as np
import pytest

from parity.core.fileio import atomic_dir, atomic_path, current_umask, write_text_atomic
from parity.probe.loader import load
from parity.probe.plan import ProbeKey
from parity.probe.results import Outcome, write_results
from parity.render import figures, tables
from parity.trace import fixtures
from test_probes import CONV1D, write_probe

from conftest import write_trace


@pytest.fixture(params=[0o002, 0o022, 0o077])
def umask(request):
    old = os.umask(request.param)
    yield request.param
    os.umask(old)


def mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def test_current_umask_reads_without_changing_it(umask):
    assert current_umask() == umask
    assert current_umask() == umask


def test_every_writer_honours_the_umask(tmp_path, umask):
    want = 0o666 & ~umask
    write_text_atomic(tmp_path / "a.txt", "x")
    tables.write_csv(tmp_path / "t.csv", [{"a": 1}], ("a",))
    tables.write_twins(tmp_path / "t.md", "# t\n")
    trace = write_trace(tmp_path / "trace.parquet", [{"w": [1.0, 2.0]}] * 3)
    probe = load(write_probe(tmp_path, "conv", CONV1D))
    key = ProbeKey("conv", "torch", "f32", "cpu")
    outcomes = [
        Outcome.ok("batch2", "loss", np.float32(1.0), ()),
        Outcome.missing_gradient("batch2", "w.grad"),
    ]
    write_results(
        tmp_path / "r.parquet",
        probe,
        key,
        outcomes,
        {"framework_version": "t", "host": "h", "runner": {}},
    )
    settings = {
        "model": {"family": "mlp", "sizes": [2, 2], "activation": "relu"},
        "loss": "mse",
        "data": {"seed": 1, "batches": 1, "batch_size": 2},
    }
    fixtures.write(tmp_path / "f.safetensors", settings)
    figures.plot_columns(
        [tmp_path / "f.png", tmp_path / "f.svg"],
        [{"step": 0, "max_dparam": 0.0}, {"step": 1, "max_dparam": 1e-7}],
        {"max_dparam": "max"},
        "t",
        1e-6,
    )
    written = ["a.txt", "t.csv", "t.md", "t.html", "r.parquet", "f.safetensors"]
    written += ["f.png", "f.svg"]
    assert {n: oct(mode(tmp_path / n)) for n in written} == {n: oct(want) for n in written}
    assert oct(mode(trace)) == oct(want)


def test_a_copied_binary_keeps_its_execute_bit(tmp_path, umask):
    src = tmp_path / "cargo-built"
    src.write_bytes(b"#!/bin/sh\n")
    src.chmod(0o755)
    with atomic_path(tmp_path / "bin" / "runner") as tmp:
        shutil.copy2(src, tmp)
    assert oct(mode(tmp_path / "bin" / "runner")) == oct(0o777 & ~umask)


def test_a_folder_is_published_whole_with_the_umasks_mode(tmp_path, umask):
    out = tmp_path / "results" / "probes"
    out.mkdir(parents=True)
    (out / "stale.yaml").write_text("from an earlier run")
    with atomic_dir(out) as tmp:
        assert tmp.parent == out.parent and tmp.name.startswith(".tmp-probes.")
        assert (out / "stale.yaml").exists()  # the old folder stays until the new one is whole
        (tmp / "new.yaml").write_text("x")
    assert sorted(p.name for p in out.iterdir()) == ["new.yaml"]
    assert oct(mode(out)) == oct(0o777 & ~umask)
    assert sorted(p.name for p in out.parent.iterdir()) == ["probes"]  # nothing left beside


def test_a_folder_whose_writer_fails_is_left_as_it_was(tmp_path):
    out = tmp_path / "repro"
    out.mkdir()
    (out / "old.rs").write_text("old")
    with pytest.raises(RuntimeError, match="boom"), atomic_dir(out) as tmp:
        (tmp / "half.rs").write_text("half")
        raise RuntimeError("boom")
    assert [p.name for p in tmp_path.iterdir()] == ["repro"]
    assert [p.name for p in out.iterdir()] == ["old.rs"]
    with atomic_dir(tmp_path / "fresh") as tmp:  # no folder there yet
        (tmp / "a").write_text("a")
    assert (tmp_path / "fresh" / "a").read_text() == "a"
