"""End-to-end: a short real fuzz campaign (conv1d and matmul, candle; the test config's one
release, 0.11.0) through the workflow's `fuzz` target finds candle 0.11.0's conv1d faults
(kernel gradient; forward through a transposed kernel) and its stride-0 batched-matmul
fault, with a clean control; then the probes target, pointed at the written probe files,
reproduces every finding in its release (verdict known-bug; fail where the framework's
values vary between runs and none are recorded)."""

import csv
import json

import pytest

from parity.probe import loader

from conftest import load_test_config, run_workflow

pytestmark = pytest.mark.workflow

FINDINGS = "results/fuzz/findings.csv"


def fuzz_config():
    config = load_test_config("probes")
    config["fuzz"].update(
        seed=21,
        cases_per_op=40,
        ops=["conv1d", "matmul"],
        frameworks=["candle"],
        dtypes=["f32"],
        shrinks_per_class=1,
    )
    return config


@pytest.fixture(scope="module")
def fuzz_run(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("fuzz")
    run_workflow(workdir, fuzz_config(), "--cores", "2", "fuzz")
    with open(workdir / FINDINGS, encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    return workdir, rows


def test_rediscovers_the_known_candle_faults_with_a_clean_control(fuzz_run):
    workdir, rows = fuzz_run
    summary = json.loads((workdir / "results/fuzz/summary.json").read_text())
    assert summary["control_failures"] == {}
    assert summary["settings"]["releases"] == {"candle": ["0.11.0"]}
    found = {
        (r["op"], r["kind"], r["layout"])
        for r in rows
        if (r["framework"], r["release"]) == ("candle", "0.11.0")
    }
    assert ("conv1d", "weight gradient", "x0: contiguous; x1: contiguous") in found
    assert ("conv1d", "forward", "x0: contiguous; x1: transpose") in found
    assert ("matmul", "forward", "x0: broadcast_to; x1: contiguous") in found
    known = {r["known_bug"] for r in rows}
    assert {"conv1d_grad:batch2", "conv1d_contiguity:input_contiguous"} <= known
    assert "matmul_broadcast:broadcast_left" in known


def test_the_campaign_is_sealed_every_probe_and_reproduction_included(fuzz_run):
    """check holds results/fuzz/ to the record the job wrote last: every file of the folder
    is in it, as written, with the runner and every known-bug probe it read."""
    from parity.core import integrity

    workdir, rows = fuzz_run
    record_path = workdir / "results/fuzz/fuzz.sources.json"
    record = integrity.read_sealed_json(record_path)
    on_disk = {
        str(p.relative_to(workdir))
        for p in (workdir / "results/fuzz").rglob("*")
        if p.is_file() and p != record_path and p.name != ".snakemake_timestamp"
    }  # (Snakemake stamps a directory output after the job)
    assert {r["path"] for r in record["tables"].values()} == on_disk
    assert sum(k.startswith("probes:") for k in record["tables"]) == len(rows) > 0
    assert any(p.endswith("conv1d_grad.yaml") for p in record["made_from"])
    assert any("/bin/" in p for p in record["made_from"])
    for r in record["tables"].values():
        assert integrity.sha256_file(workdir / r["path"]) == r["sha256"]


def test_every_written_probe_reproduces_through_the_probes_target(fuzz_run):
    workdir, rows = fuzz_run
    folder = workdir / "results/fuzz/probes"
    names = sorted(p.name.removesuffix(".yaml") for p in folder.glob("*.yaml"))
    assert len(names) == len(rows) > 0
    for n in names:
        loader.load(folder / f"{n}.yaml")
    config = fuzz_config()
    config["probes"].update({"folder": str(folder), "select": None, "dtypes": ["f32"]})
    run_workflow(workdir, config, "--cores", "2", "results/tables/probes.csv")
    with open(workdir / "results/tables/probes.csv", encoding="utf-8") as f:
        table = list(csv.DictReader(f))
    for r in rows:
        probe = r["probe"].rsplit("/", 1)[-1].removesuffix(".yaml")
        verdicts = {
            t["quantity"]: t["verdict"]
            for t in table
            if (t["probe"], t["framework"], t["version"], t["dtype"])
            == (probe, r["framework"], r["release"], "f32")
        }
        bug = loader.load(folder / f"{probe}.yaml").case("case")["known_bug"]
        for q in r["quantities"].split():
            # Values that differ between runs are not recorded: their verdict is fail.
            recorded = q in bug.get(r["framework"], {}).get("cpu", {})
            versions = loader.load(folder / f"{probe}.yaml").case("case")["known_bug_versions"]
            recorded &= r["release"] in versions.get(r["framework"], [r["release"]])
            want = "known-bug" if recorded else "fail"
            assert verdicts[q] == want, (probe, q, verdicts)
