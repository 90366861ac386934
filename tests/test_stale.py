"""No stale verdicts, no unnoticed corruption, outputs the group can read: the issue's
reproductions on the real workflow (docs/bad-input.md).

One small run (.test/stale.yaml: two experiments of three steps in float32, one probe) is
made once under umask 002; each test works on its own copy of it.
"""

import copy
import csv
import logging
import os
import re
import shutil
import stat
from pathlib import Path

import pytest
import yaml

from parity.core import integrity, paths
from parity.core.codeversion import code_version
from parity.plan.plan import Plan
from parity.probe.plan import ProbePlan
from parity.report import check, partial, sealed
from parity.trace.reader import TraceReader

from conftest import REPO, load_test_config, record_binary, run_workflow

pytestmark = pytest.mark.workflow

TRACE = "results/traces/a3_sgd/candle-f32-cpu.parquet"


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("finished")
    config = load_test_config("stale")
    run_workflow(workdir, config, "--cores", "2", umask=0o002)
    return workdir, config


@pytest.fixture
def run(finished, tmp_path):
    """A copy of the finished run (mtimes and Snakemake's records kept), at the same depth:
    the jobs name their inputs relative to the working directory."""
    src, config = finished
    shutil.copytree(src, tmp_path, symlinks=True, dirs_exist_ok=True)
    return tmp_path, copy.deepcopy(config)


def rows(path):
    with open(path, encoding="utf-8") as f:
        return {(r["experiment"], r["comparison"]): r for r in csv.DictReader(f)}


def probe_rows(path):
    with open(path, encoding="utf-8") as f:
        return list(csv.DictReader(f))


def test_every_output_is_readable_by_the_group(finished):
    workdir, _ = finished
    modes = {}
    for p in (workdir / "results").rglob("*"):
        if p.is_file() and ".tmp-" not in p.name and not p.name.startswith(".tables"):
            modes[str(p.relative_to(workdir))] = stat.S_IMODE(p.stat().st_mode)
    assert len(modes) > 50
    for name, mode in modes.items():
        binary = name.startswith("results/bin/") and not name.endswith(".record.json")
        want = 0o775 if binary else 0o664
        assert oct(mode) == oct(want), name


def test_the_summary_says_what_it_was_made_from(finished):
    workdir, config = finished
    record = integrity.read_sealed_json(workdir / paths.SUMMARY_SOURCES)
    plan = Plan(config)
    assert set(record["made_from"]) == {c.result(k) for c in plan.comparisons() for k in c.kinds}
    assert re.fullmatch(r"\d{8}T\d{6}Z-[0-9a-f]{8}", record["run_id"])
    md = (workdir / "results/tables/summary.md").read_text()
    n = len(record["made_from"])  # per-step, split, diagnosis and localisation results
    assert f"Made by run {record['run_id']} from {n} comparison results" in md
    probes = integrity.read_sealed_json(workdir / paths.PROBES_SOURCES)
    probe_plan = ProbePlan.from_config(config, REPO)
    assert set(probes["made_from"]) == set(probe_plan.results())
    assert probes["run_id"] == record["run_id"]
    assert not list((workdir / "results/tables").glob("*.partial.*"))


def test_truncated_fixture_with_keep_going_shows_no_earlier_pass(run):
    """Issue 22, kind 1: every run of an experiment fails, its traces are gone;
    summary.csv must not still show its earlier verdict."""
    workdir, config = run
    fixture = workdir / "results/fixtures/a3_wd_mismatch.safetensors"
    fixture.write_bytes(fixture.read_bytes()[:100])
    proc = run_workflow(workdir, config, "--cores", "2", "--keep-going", check=False)
    assert proc.returncode != 0
    assert not (workdir / "results/tables/summary.csv").exists()
    assert not (workdir / paths.SUMMARY_SOURCES).exists()
    partial = rows(workdir / "results/tables/summary.partial.csv")
    assert partial[("a3_sgd", "main")]["verdict"] == "pass"  # what could run, ran
    bad = partial[("a3_wd_mismatch", "main")]
    assert bad["verdict"] == "error"
    log = re.search(r"see (\S+\.log)", bad["status"]).group(1)
    assert log.startswith("results/logs/train/a3_wd_mismatch/")
    assert "its trace is missing" in bad["status"]
    assert "not a readable safetensors file" in (workdir / log).read_text()
    assert "summary.partial.md lists them" in proc.stdout
    check = run_workflow(workdir, config, "--cores", "1", "check", check=False)
    assert check.returncode != 0
    assert not (workdir / "results/tables/summary.csv").exists()


def test_a_comparison_that_failed_then_works_again_leaves_no_stale_error(run):
    """Issue 22, kind 1: break a trace so its comparison fails, restore it, rerun: the
    summary is made again (nothing stale is 'up to date') and check passes."""
    workdir, config = run
    trace = workdir / TRACE
    good = trace.read_bytes()
    trace.write_bytes(good[: len(good) // 2])
    proc = run_workflow(workdir, config, "--cores", "2", check=False)
    assert proc.returncode != 0
    assert not (workdir / "results/tables/summary.csv").exists()
    bad = rows(workdir / "results/tables/summary.partial.csv")[("a3_sgd", "main")]
    assert bad["verdict"] == "error" and "results/logs/perstep/a3_sgd/cpu.log" in bad["status"]
    trace.write_bytes(good)
    again = run_workflow(workdir, config, "--cores", "2", "check")
    assert "Nothing to be done" not in again.stdout
    log = (workdir / "results/logs/check.log").read_text()
    assert "WARNING" not in log  # every file a person reads is sealed and verified
    assert rows(workdir / "results/tables/summary.csv")[("a3_sgd", "main")]["verdict"] == "pass"
    assert not (workdir / "results/tables/summary.partial.csv").exists()


def test_a_flipped_bit_in_a_trace_value_fails_the_comparison_naming_the_file(run):
    """Issue 22, kind 2: size and mtime kept, the comparison rerun: refused, not a changed
    verdict."""
    workdir, config = run
    trace = workdir / TRACE
    before = trace.stat()
    offset, size = TraceReader(trace).byte_range(0)
    middle = offset + size // 2
    data = bytearray(trace.read_bytes())
    data[middle] ^= 0x04
    trace.write_bytes(bytes(data))
    os.utime(trace, ns=(before.st_atime_ns, before.st_mtime_ns))
    target = "results/tables/a3_sgd/perstep-cpu.csv"
    # The target before --forcerun, which takes every word after it as a rule name (else
    # every perstep job of the default target runs, in no fixed order), and after --cores,
    # since run_workflow's --configfile before it also takes every word.
    proc = run_workflow(workdir, config, "--cores", "1", target, "--forcerun", "perstep",
                        check=False)  # fmt: skip
    assert proc.returncode != 0
    log = (workdir / "results/logs/perstep/a3_sgd/cpu.log").read_text()
    assert f"{TRACE}: corrupt:" in log and "CRC checksum verification failed" in log
    assert not (workdir / target).exists()


def test_a_crashed_probe_job_is_named_in_the_partial_probe_table(run):
    """Issue 22, kind 1: with --keep-going and a probe job that crashes, the old probes.csv
    is not left standing, and the failed cell is named with its log."""
    workdir, config = run
    binary = workdir / "results/bin/burn-parity-0.22.1-cpu"
    real = binary.with_name("burn-parity-real")
    binary.rename(real)
    binary.write_text(
        f'#!/bin/sh\n[ "$1" = probe ] && {{ echo "burn-parity: crashed" >&2; exit 3; }}\n'
        f'exec {real} "$@"\n'
    )
    binary.chmod(0o755)
    record_binary(binary)  # the checkout's build id: this test is about a crash, not the check
    proc = run_workflow(workdir, config, "--cores", "2", "--keep-going", check=False)
    assert proc.returncode != 0
    assert not (workdir / "results/tables/probes.csv").exists()
    table = probe_rows(workdir / "results/tables/probes.partial.csv")
    # Every burn cell that runs is an error; its half-precision cells never run (burn's
    # ndarray backend has none) and stay unsupported.
    burn = [r for r in table if r["framework"] == "burn" and r["dtype"] in ("f32", "f64")]
    assert burn and all(r["verdict"] == "error" for r in burn)
    half = [r for r in table if r["framework"] == "burn" and r["dtype"] in ("f16", "bf16")]
    assert {r["verdict"] for r in half} <= {"unsupported"}
    assert "results/logs/probes/burn-f32-cpu.log" in burn[0]["note"]
    assert {r["verdict"] for r in table if r["framework"] == "torch"} <= {"reference", "pass"}
    assert "probe job(s) have no current result" in proc.stdout
    # The burn runs trained again to the same traces: the summary was remade and is current.
    assert rows(workdir / "results/tables/summary.csv")[("a3_sgd", "burn")]["verdict"] == "pass"


def test_a_trace_that_is_gone_takes_its_pass_with_it(run, monkeypatch):
    workdir, config = run
    monkeypatch.chdir(workdir)
    plan = Plan(config)
    (workdir / TRACE).unlink()
    with pytest.raises(check.StaleTable, match=f"{TRACE} is gone"):
        check.check("results/tables/summary.csv", logging.getLogger("t"), None)
    codes = {"perstep": None, "split": None, "diagnosis": None, "summary": None}
    comparisons = [(c, plan.comparison_job(c)) for c in plan.comparisons()]
    line = partial.after_failed_run(comparisons, plan.unsupported_params(), codes)
    assert "removed the stale results/tables/summary.csv" in line
    row = rows("results/tables/summary.partial.csv")[("a3_sgd", "main")]
    assert row["verdict"] == "error" and "candle f32 cpu failed" in row["status"]
    control = rows("results/tables/summary.partial.csv")[("a3_wd_mismatch", "main")]
    assert control["verdict"] == "expected-fail"
    assert not Path("results/tables/summary.csv").exists()


# ----- check holds every table a person reads to its records (issue 36, kind 3) ---------


def as_snakemake_reads(config) -> dict:
    """``config`` as the workflow sees it: written as run_workflow writes it (YAML, keys
    sorted), so lists made in config order (the release matrix's comparisons) come in the
    workflow's order."""
    return yaml.safe_load(yaml.safe_dump(config))


def page_specs(config) -> list[dict]:
    """Each sealed page's spec as its rule resolves it (rules/functions/summary.smk
    page_seal) in the working directory: under ``config``, with its code hash."""
    config = as_snakemake_reads(config)
    plan = Plan(config)
    probes = ProbePlan.from_config(config, REPO)
    text = os.path.relpath(REPO / "report" / "training_loop.rst")
    return [
        sealed.plan_spec(
            page,
            plan,
            probes if probes.probes else None,
            text,
            code_version(str(REPO / "scripts" / sealed.SCRIPTS[page])),
        )
        for page in sealed.PAGES
    ]


def check_params_of(config) -> dict:
    """What the check rule gives its job (rules/functions/summary.smk), the comparison
    jobs' code hashes left out (None: not compared)."""
    plan = Plan(config)
    probes = ProbePlan.from_config(config, REPO)
    return check.check_params(
        [plan.comparison_job(c) for c in plan.comparisons()],
        plan.unsupported_params(),
        dict.fromkeys(("perstep", "localise", "summary", "probes_table")),
        [],
        probes.to_params() if probes.probes else None,
        {},
        page_specs(config),
    )


def test_check_finds_nothing_in_a_current_run(run, monkeypatch):
    workdir, config = run
    monkeypatch.chdir(workdir)
    params = check_params_of(config)
    assert check.problems(params) == []
    # and every file a person reads is covered by a record it held
    assert sealed.unverified(sealed.recorded_files(check.records(params))) == []
    assert {spec["page"] for spec in params["pages"]} == set(sealed.PAGES)


#: Tables a person reads and the sealed record that holds each one's sha256.
PERSTEP = "results/compare/a3_sgd/perstep-cpu.json"
LOCALISE = "results/compare/a3_sgd/localise-main-cpu.json"
READ_TABLES = {
    **{f"results/tables/a3_sgd/perstep-cpu.{e}": PERSTEP for e in ("csv", "md", "html")},
    # a3_sgd main passes: its localisation is skipped, a Markdown and HTML table, no CSV
    **{f"results/tables/a3_sgd/localise-main-cpu.{e}": LOCALISE for e in ("md", "html")},
    "results/tables/summary.md": paths.SUMMARY_SOURCES,
    "results/tables/summary.html": paths.SUMMARY_SOURCES,
    "results/tables/probes.md": paths.PROBES_SOURCES,
    # issue 36, kind 3: every other file a person reads
    **{f"results/tables/provenance.{e}": paths.PROVENANCE_SOURCES for e in ("csv", "md", "html")},
    "results/tables/framework_summary.md": paths.FRAMEWORK_SUMMARY_SOURCES,
    "results/tables/optimizer_defaults.csv": paths.OPTIMIZER_DEFAULTS_SOURCES,
    "results/tables/optimizer_defaults.html": paths.OPTIMIZER_DEFAULTS_SOURCES,
    "results/tables/versions.csv": paths.VERSIONS_TABLE_SOURCES,
    "results/tables/versions.md": paths.VERSIONS_TABLE_SOURCES,
    paths.TRAINING_LOOP_PAGE: paths.TRAINING_LOOP_SOURCES,
    **{f"results/figures/a3_sgd/perstep-cpu.{e}": PERSTEP for e in ("png", "svg")},
    # issue 38: the index of results/
    paths.INDEX: paths.INDEX_SOURCES,
}


def edit_by_hand(path: Path) -> None:
    """Change ``path`` as a person would: a verdict in a text file, a pixel's worth of an
    image (its last byte)."""
    if path.suffix == ".png":
        data = bytearray(path.read_bytes())
        data[-1] ^= 0x01
        path.write_bytes(bytes(data))
        return
    text = path.read_text(encoding="utf-8")
    path.write_text(text.replace("pass", "fail", 1) + "\n", encoding="utf-8")


@pytest.mark.parametrize("table", sorted(READ_TABLES))
def test_a_hand_edited_table_fails_check_naming_it(run, monkeypatch, table):
    workdir, config = run
    monkeypatch.chdir(workdir)
    assert Path(table).is_file() and Path(READ_TABLES[table]).is_file()
    edit_by_hand(Path(table))
    found = check.problems(check_params_of(config))
    assert len(found) == 1, found
    assert found[0].startswith(f"{table}: sha256"), found
    assert f"that {READ_TABLES[table]} recorded when it was written: edited by hand" in found[0]
    with pytest.raises(check.StaleTable, match=re.escape(table)):
        check.check(
            "results/tables/summary.csv",
            logging.getLogger("t"),
            "results/tables/probes.csv",
            params=check_params_of(config),
        )


def test_check_refuses_a_hand_edited_comparison_table(run):
    workdir, config = run
    table = workdir / "results/tables/a3_sgd/perstep-cpu.md"
    table.write_text(table.read_text().replace("verdict **pass**", "verdict **fail**"))
    proc = run_workflow(workdir, config, "--cores", "1", "check", check=False)
    assert proc.returncode != 0
    log = (workdir / "results/logs/check.log").read_text()
    assert "results/tables/a3_sgd/perstep-cpu.md: sha256" in log
    assert "edited by hand or corrupt" in log


def test_a_summary_made_under_another_tolerance_fails_check_naming_the_stale_verdict(run):
    """--rerun-triggers mtime reruns nothing when only the config changed: the comparisons'
    results and the summary made under the old tolerance stay, and check names them."""
    workdir, config = run
    config["tolerance"] = 1e-9
    proc = run_workflow(
        workdir, config, "--cores", "1", "check", "--rerun-triggers", "mtime", check=False
    )
    assert proc.returncode != 0
    assert "Nothing to be done" not in proc.stdout
    log = (workdir / "results/logs/check.log").read_text()
    assert (
        "a3_sgd main cpu: results/compare/a3_sgd/perstep-cpu.json was made under another "
        "config (its verdict pass was judged at tolerance 1e-06; the config now says 1e-09)"
    ) in log
    assert "comparisons, 0 differ" not in log  # refused, never judged


def reseal(record: str, **change) -> None:
    """Rewrite a sealed record with ``change`` and a valid seal: the record a job made
    under another config (or by other code) writes."""
    obj = integrity.read_sealed_json(record)
    integrity.write_sealed_json(record, {**obj, **change})


@pytest.mark.parametrize("page", sorted(sealed.PAGES))
def test_a_page_whose_record_says_another_config_or_code_fails_check(run, monkeypatch, page):
    workdir, config = run
    monkeypatch.chdir(workdir)
    table, record = sealed.PAGES[page]
    reseal(record, params_sha256="0" * 64, code="0" * 16)
    found = check.problems(check_params_of(config))
    assert found == [
        f"{table} was made under another config ({record} says so); rerun",
        f"{table} was made by other code ({record} says so); rerun",
    ]


def test_pages_made_under_another_config_fail_check_naming_each(run, monkeypatch):
    """The config now runs one experiment fewer and a framework table row: the
    provenance, the framework table and the release matrix on disk were made under the
    old one, and each is named."""
    workdir, config = run
    monkeypatch.chdir(workdir)
    config["experiments"]["a3_wd_mismatch"]["enabled"] = False
    config["framework_summary"] = [{"experiment": "a3_sgd", "label": "A3 SGD"}]
    found = check.problems(check_params_of(config))
    gone = "results/traces/a3_wd_mismatch/"
    provenance = [p for p in found if p.startswith("results/tables/provenance.csv")]
    assert len(provenance) == 1 and provenance[0].startswith(
        "results/tables/provenance.csv was made from other files than the config's "
        f"(not in the config: {gone}"
    )
    assert (
        "results/tables/framework_summary.csv was made under another config "
        f"({paths.FRAMEWORK_SUMMARY_SOURCES} says so); rerun"
    ) in found
    (inputs,) = [p for p in found if p.startswith("results/tables/framework_summary.csv was")][1:]
    assert inputs.startswith(
        "results/tables/framework_summary.csv was made from other files than the config's "
        "(missing: "
    )
    assert "results/compare/a3_sgd/perstep-cpu.json" in inputs
    assert (
        f"results/tables/versions.csv was made under another config "
        f"({paths.VERSIONS_TABLE_SOURCES} says so); rerun"
    ) in found
    # the pages that do not depend on the config are still current
    assert not [p for p in found if "optimizer_defaults" in p or "training_loop" in p]


def test_a_page_without_its_record_or_with_a_changed_input_fails_check(run, monkeypatch):
    workdir, config = run
    monkeypatch.chdir(workdir)
    Path(paths.TRAINING_LOOP_SOURCES).unlink()
    defaults = Path("results/defaults/torch.json")
    defaults.write_text(defaults.read_text() + " ")
    found = check.problems(check_params_of(config))
    assert found == [
        f"results/tables/optimizer_defaults.csv is out of date: {defaults} changed since",
        (
            f"{paths.TRAINING_LOOP_PAGE} has no record ({paths.TRAINING_LOOP_SOURCES} is "
            "missing): rerun the workflow"
        ),
    ]


def test_check_names_every_file_a_person_reads_that_no_record_covers(run, monkeypatch, caplog):
    workdir, config = run
    monkeypatch.chdir(workdir)
    Path("results/report.html").write_text("<html></html>")
    Path("results/tables/a3_adam").mkdir()
    Path("results/tables/a3_adam/perstep-cpu.csv").write_text("step\n")
    said = []
    with caplog.at_level(logging.WARNING):
        bad = check.check(
            "results/tables/summary.csv",
            logging.getLogger("t"),
            "results/tables/probes.csv",
            params=check_params_of(config),
            say=said.append,
        )
    assert bad == []  # nothing stale: judged, and every verdict meets its expectation
    assert said == [
        (
            "check: results/report.html: not sealed (Snakemake's own report, made by "
            "`snakemake --report` from the files check verifies, not by a job); make it "
            "again after check passes"
        ),
        (
            "check: results/tables/a3_adam/perstep-cpu.csv: not verified (no record check "
            "holds covers it: made by another target, such as faults, or left by another "
            "config)"
        ),
    ]
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING] == [
        line.removeprefix("check: ") for line in said
    ]


def test_check_refuses_hand_edited_pages_and_pages_of_another_config(run):
    """The real check job, with --rerun-triggers mtime (no page is made again: every
    input is older than it): a figure and the training-loop page edited by hand, and the
    provenance and the release matrix made under the old config (one experiment more),
    are each named in its log."""
    workdir, config = run
    edit_by_hand(workdir / "results/figures/a3_sgd/perstep-cpu.png")
    edit_by_hand(workdir / paths.TRAINING_LOOP_PAGE)
    config["experiments"]["a3_wd_mismatch"]["enabled"] = False
    proc = run_workflow(
        workdir, config, "--cores", "1", "check", "--rerun-triggers", "mtime", check=False
    )
    assert proc.returncode != 0
    log = (workdir / "results/logs/check.log").read_text()
    assert "results/figures/a3_sgd/perstep-cpu.png: sha256" in log
    assert f"{paths.TRAINING_LOOP_PAGE}: sha256" in log
    assert "results/tables/versions.csv was made under another config" in log
    assert (
        "results/tables/provenance.csv was made from other files than the config's "
        "(not in the config: results/traces/a3_wd_mismatch/"
    ) in log
    assert "comparisons, 0 differ" not in log  # refused, never judged


# ----- issue 38: what a run leaves, and its index ----------------------------------------


def localisations(workdir: Path) -> dict[str, dict]:
    """Every localisation result of the run, by path."""
    return {
        str(p.relative_to(workdir)): integrity.read_sealed_json(p)
        for p in sorted((workdir / "results/compare").glob("*/localise-*.json"))
    }


def test_a_skipped_localisation_leaves_no_csv_or_figure_and_a_localised_one_does(finished):
    workdir, _ = finished
    found = localisations(workdir)
    status = {r["experiment"] + " " + r["comparison"]: r["status"] for r in found.values()}
    assert status["a3_sgd main"] == "skipped"
    assert status["a3_wd_mismatch main"] == "localised"
    assert set(status.values()) == {"skipped", "localised"}
    for r in found.values():
        stem = f"{r['experiment']}/localise-{r['comparison']}-{r['device']}"
        files = {
            k: workdir / f"results/{d}/{stem}.{k}"
            for d, ks in (("tables", ("csv", "md", "html")), ("figures", ("png", "svg")))
            for k in ks
        }
        there = sorted(k for k, f in files.items() if f.exists())
        # what the job wrote is on disk and in its sealed record, nothing more
        assert sorted(r["tables"]) == there
        html = files["html"].read_text()
        if r["status"] == "skipped":
            assert there == ["html", "md"]
            assert "<img" not in html
        else:
            assert there == ["csv", "html", "md", "png", "svg"]
            assert html.count('<img alt="localisation figure" src="data:image/png;base64,') == 1
    figures = sorted(
        str(p.relative_to(workdir)) for p in (workdir / "results/figures").rglob("localise-*")
    )
    assert figures == sorted(
        r["tables"][k]["path"]
        for r in found.values()
        if r["status"] == "localised"
        for k in ("png", "svg")
    )
    assert "results/figures/a3_wd_mismatch/localise-main-cpu.png" in figures


def index_rows(text: str) -> dict[tuple, list[str]]:
    """(experiment, comparison, device) → the cells of its row in the index."""
    out, experiment = {}, None
    for line in text.splitlines():
        if line.startswith("## "):
            experiment = line[3:]
        elif line.startswith("| ") and experiment and not line.startswith("| comparison"):
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
            out[(experiment, cells[0], cells[1])] = cells
    return out


def test_the_index_lists_every_comparison_with_its_verdict_and_links_that_exist(finished):
    workdir, _ = finished
    text = (workdir / paths.INDEX).read_text()
    with open(workdir / "results/tables/summary.csv", encoding="utf-8") as f:
        summary = list(csv.DictReader(f))
    listed = index_rows(text)
    assert set(listed) == {(r["experiment"], r["comparison"], r["device"]) for r in summary}
    for r in summary:
        assert listed[r["experiment"], r["comparison"], r["device"]][2] == r["verdict"]
    assert listed["a3_wd_mismatch", "main", "cpu"][2] == "expected-fail"
    links = re.findall(r"\]\(([^)]+)\)", text)
    assert links and all((workdir / "results" / link).is_file() for link in links), links
    # every table (Markdown) and figure (PNG) each comparison's jobs wrote is linked
    wrote = set()
    for result in (workdir / "results/compare").glob("*/*.json"):
        tables = integrity.read_sealed_json(result)["tables"]
        wrote |= {tables[k]["path"] for k in ("md", "png") if k in tables}
    assert wrote and {f"results/{link}" for link in links} >= wrote
    for page in ("tables/summary.md", "tables/probes.md", "tables/provenance.md"):
        assert f"]({page})" in text
    assert f"**{len(summary)} comparisons**" in text
    assert "**0** differ from their expectation" in text


def test_check_names_an_index_no_record_covers(run, monkeypatch):
    workdir, config = run
    monkeypatch.chdir(workdir)
    Path(paths.INDEX_SOURCES).unlink()
    params = check_params_of(config)
    assert check.problems(params) == [
        f"{paths.INDEX} has no record ({paths.INDEX_SOURCES} is missing): rerun the workflow"
    ]
    said = (
        f"{paths.INDEX}: not verified (no record check holds covers it: made by another "
        "config, or written by hand)"
    )
    assert sealed.unverified(sealed.recorded_files(check.records(params))) == [said]
