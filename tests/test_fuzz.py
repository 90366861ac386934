"""The layout fuzzer without frameworks: generator determinism and validity, layout
routes and their adjoints, shrinking against a fake checker with a known minimal form,
and the written probe files' validity (parity.fuzz)."""

import json
import logging
from pathlib import Path

import numpy as np
import pytest

from parity.fuzz import campaign, check, generate, job, report, shrink
from parity.fuzz.generate import Case, Route
from parity.probe import loader
from parity.probe import ops as probe_ops
from parity.probe.shapes import table as probe_shapes


def test_same_seed_same_cases_byte_for_byte():
    a = generate.generate(7, generate.SUPPORTED_OPS, 3)
    b = generate.generate(7, generate.SUPPORTED_OPS, 3)
    assert [n for n, _ in a] == [n for n, _ in b]
    assert [generate.dump(generate.to_doc(c)) for _, c in a] == [
        generate.dump(generate.to_doc(c)) for _, c in b
    ]
    other = generate.generate(8, generate.SUPPORTED_OPS, 3)
    assert [c for _, c in a] != [c for _, c in other]


def test_an_op_added_leaves_the_other_ops_cases_as_they_were():
    alone = generate.generate(7, ["matmul"], 4)
    more = generate.generate(7, ["conv1d", "matmul"], 4)
    assert alone == [x for x in more if x[1].op == "matmul"]


def test_every_generated_case_loads_and_its_shapes_infer():
    kinds = set()
    for name, case in generate.generate(3, generate.SUPPORTED_OPS, 8):
        p = generate.to_probe(name, case)
        (c,) = p.cases
        shapes = p.quantity_shapes(c)
        assert shapes["y"][0] == list(case.out_shape)
        scored = case.op not in probe_shapes.INTEGER_OUTPUT
        for i, inp in enumerate(case.inputs):
            if inp.grad and scored:
                assert shapes[f"x{i}.grad"][0] == list(inp.stored_shape)
            else:
                assert f"x{i}.grad" not in shapes
            assert inp.logical().shape == inp.shape
            assert all(1 <= n <= 6 for n in inp.shape)
            kinds.update(inp.route.kinds())
        out, _ = probe_shapes.infer(
            case.op, probe_ops.op_args(case.op, case.args), [list(i.shape) for i in case.inputs]
        )
        assert tuple(out) == case.out_shape
        # Exactly representable values: small integers or multiples of 1/8.
        for inp in case.inputs:
            assert all(float(v * 8).is_integer() for v in inp.stored)
    assert kinds == {"transpose", "narrow", "broadcast_to"}


def test_route_adjoint_is_the_gradient_of_the_route():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    for _ in range(50):
        shape = tuple(int(n) for n in rng.integers(1, 5, size=int(rng.integers(1, 4))))
        route, stored_shape = generate.random_route(rng, shape)
        leaf = torch.zeros(stored_shape, dtype=torch.float64, requires_grad=True)
        view = leaf
        for op, a in route.steps:
            if op == "transpose":
                view = view.transpose(a["dim0"], a["dim1"])
            elif op == "narrow":
                view = view.narrow(a["dim"], a["start"], a["length"])
            else:
                view = view.expand(a["shape"])
        g = rng.integers(-3, 4, size=shape).astype(np.float64)
        (view * torch.tensor(g)).sum().backward()
        got = generate.route_adjoint(route, g, stored_shape)
        assert np.array_equal(got, leaf.grad.numpy())


def _broadcast_matmul() -> Case:
    """matmul of x0 [3, 4, 5] (stored [1, 5, 4]: broadcast along the batch, then
    transposed) by a narrowed x1 [3, 5, 2]."""
    rng = np.random.default_rng(1)
    stored0 = rng.integers(-3, 4, size=(1, 5, 4)).astype(float)
    r0 = Route((("broadcast_to", {"shape": [3, 5, 4]}), ("transpose", {"dim0": 1, "dim1": 2})))
    logical0 = generate.apply_route(stored0, r0)
    x0 = shrink.restore(r0, np.ascontiguousarray(logical0))
    r1 = Route((("narrow", {"dim": 2, "start": 1, "length": 2}),))
    x1 = shrink.restore(r1, rng.integers(-3, 4, size=(3, 5, 2)).astype(float))
    assert x0 is not None and x1 is not None
    return Case("matmul", {}, (x0, x1), (3, 4, 2), tuple([1.0] * 24))


def fake_checker(calls):
    """Fails (candle, f32, forward) exactly when x0 reaches matmul through a broadcast."""

    def checker(named):
        calls.append(len(named))
        return {
            n: [
                check.Failure(
                    "fail",
                    message="fake",
                    framework="candle",
                    dtype="f32",
                    quantity="y",
                    kind=check.FORWARD,
                )
            ]
            if "broadcast_to" in c.inputs[0].route.kinds()
            else []
            for n, c in named
        }

    return checker


def test_shrinking_reaches_the_known_minimal_form():
    calls = []
    small, ran = shrink.shrink(
        "m", _broadcast_matmul(), ("candle", "", "f32", check.FORWARD), fake_checker(calls)
    )
    x0, x1 = small.inputs
    assert x0.route.kinds() == ["broadcast_to"] and x1.route.kinds() == []
    # The broadcast needs a batch of 2; every other dimension is 1.
    assert (x0.shape, x0.stored_shape, x1.shape, small.out_shape) == (
        (2, 1, 1),
        (1, 1, 1),
        (2, 1, 1),
        (2, 1, 1),
    )
    assert np.array_equal(x0.logical(), np.broadcast_to(x0.logical()[:1], (2, 1, 1)))
    assert ran == sum(calls) and len(calls) > 1
    # A fixpoint: no one-step simplification keeps the failure.
    assert not any("broadcast_to" in c.inputs[0].route.kinds() for c in shrink.candidates(small))


def test_shrinking_a_case_that_never_fails_the_same_way_keeps_it():
    case = _broadcast_matmul()
    small, _ = shrink.shrink("m", case, ("burn", "", "f32", check.FORWARD), fake_checker([]))
    assert small == case


def test_written_probe_files_load_and_name_the_framework_values(tmp_path):
    case = _broadcast_matmul()
    fail = check.Failure(
        "fail",
        message="differs",
        framework="candle",
        dtype="f32",
        quantity="y",
        kind=check.FORWARD,
        values=tuple([0.0] * 24),
        reference=tuple([1.0] * 24),
        reference64=tuple([1.0] * 24),
        release="0.11.0",
    )
    err = check.Failure(
        "framework-error",
        message="boom",
        framework="candle",
        dtype="f32",
        quantity="x1.grad",
        kind=check.ERROR,
        release="0.11.0",
    )
    findings = [
        campaign.Finding(
            "matmul", "candle", "f32", check.FORWARD, case, [fail], ["a", "b"], release="0.11.0"
        ),
        campaign.Finding(
            "matmul", "candle", "f32", check.ERROR, case, [err], ["c"], release="0.11.0"
        ),
    ]
    result = campaign.Campaign(findings, {}, 3, 3, {"total": 1.0})
    (tmp_path / "probes").mkdir()
    (tmp_path / "probes" / "fuzz_from_an_earlier_campaign.yaml").write_text("stale")
    rows = job.write_findings(
        result,
        5,
        Path("probes"),
        tmp_path / "f.csv",
        tmp_path / "f.md",
        tmp_path / "probes",
        tmp_path / "repro",
        {"ops": ["matmul"], "frameworks": ["candle"], "releases": {"candle": ["0.11.0"]}},
    )
    assert len(rows) == 2
    for r in rows:
        p = loader.load(r["probe"])
        (c,) = p.cases
        assert c["known_bug"]["candle"]["cpu"]
        assert (tmp_path / "repro" / f"{p.name}.rs").read_text().count("fn main") == 1
    p = loader.load(rows[0]["probe"])
    assert p.case("case")["known_bug"]["candle"]["cpu"]["y"] == {"values": [0.0] * 24}
    assert (
        loader.load(rows[1]["probe"]).case("case")["known_bug"]["candle"]["cpu"]["x1.grad"]
        == "framework-error"
    )
    # The repository's matmul probe records a broadcast left batch: the forward finding
    # (x0 broadcast → transpose) is related, not the same layout.
    assert rows[0]["known_bug"] == "new" and "matmul_broadcast:broadcast_left" in rows[0]["related"]
    md = (tmp_path / "f.md").read_text()
    assert "| matmul | candle | 0.11.0 | f32 | forward |" in md
    assert "frameworks candle 0.11.0;" in md and "(candle 0.11.0: 2)" in md
    # each folder is replaced whole: an earlier campaign's probe file is gone
    assert sorted(p.name for p in (tmp_path / "probes").iterdir()) == sorted(
        Path(r["probe"]).name for r in rows
    )
    assert not [p for p in tmp_path.iterdir() if p.name.startswith((".tmp-", ".old-"))]
    with open(tmp_path / "f.csv", newline="", encoding="utf-8") as f:
        assert f.readline().startswith("op,framework,release,dtype,kind,layout")


def test_the_fuzz_job_writes_every_output_atomically_and_the_summary_last(tmp_path):
    """The job function the rule's adapter calls, with PyTorch alone (no framework to
    fuzz): the campaign runs its cases and the control, and every output is written."""
    outputs = {
        "csv": str(tmp_path / "fuzz" / "findings.csv"),
        "md": str(tmp_path / "fuzz" / "findings.md"),
        "summary": str(tmp_path / "fuzz" / "summary.json"),
        "probes": str(tmp_path / "fuzz" / "probes"),
        "repro": str(tmp_path / "fuzz" / "repro"),
        "record": str(tmp_path / "fuzz" / "fuzz.sources.json"),
    }
    Path(outputs["repro"]).mkdir(parents=True)
    (Path(outputs["repro"]) / "stale.rs").write_text("from an earlier campaign")
    settings = {
        "seed": 3,
        "ops": ["matmul"],
        "cases_per_op": 2,
        "frameworks": [],
        "dtypes": ["f32"],
        "shrinks_per_class": 1,
    }
    log = logging.getLogger("test_fuzz")
    summary = job.fuzz(settings, [], [], outputs, 1, log)
    assert list(summary) == [
        "settings",
        "cases",
        "failing_cases",
        "findings",
        "new",
        "findings_by_release",
        "control_failures",
        "seconds",
        "threads",
        "machine",
    ]
    assert (summary["cases"], summary["findings"], summary["control_failures"]) == (2, 0, {})
    written = json.loads(Path(outputs["summary"]).read_text())
    assert written == {**summary, "settings": settings}
    assert Path(outputs["summary"]).read_text() == json.dumps(summary, indent=2)
    assert list(Path(outputs["repro"]).iterdir()) == []
    assert list(Path(outputs["probes"]).iterdir()) == []
    assert Path(outputs["md"]).read_text().startswith("# Layout fuzzer findings")
    assert sorted(p.name for p in (tmp_path / "fuzz").iterdir()) == [
        "findings.csv",
        "findings.md",
        "probes",
        "repro",
        "summary.json",
    ]  # no seal given: no record
    with pytest.raises(ValueError):  # a binary per framework, or none is run
        job.fuzz({**settings, "frameworks": ["candle"]}, [], [], outputs, 1, log)


def test_known_bug_cases_read_the_layout_before_the_op():
    known = report.known_bug_cases("probes")
    conv = {(k["case"], k["framework"]): k for k in known if k["probe"] == "conv1d_contiguity"}
    assert conv[("input_contiguous", "candle")]["layout"] == ((), ("transpose",))
    assert conv[("both_strided", "candle")]["layout"] == (("transpose",), ("transpose",))
    (mm,) = [k for k in known if k["probe"] == "matmul_broadcast"]
    assert mm["layout"] == (("broadcast_to",), ()) and mm["kinds"] == {
        check.FORWARD,
        check.INPUT_GRAD,
    }


def test_a_known_bug_of_other_releases_does_not_cover_the_release_fuzzed():
    """conv2d_kernel_offset's known bug names candle 0.11.0 only: it is read for a campaign
    of 0.11.0 (or one that names no release), and left out for one of 0.11.1, whose
    findings of that kind are then new."""

    def offset_bugs(releases):
        known = report.known_bug_cases("probes", releases)
        return [k for k in known if k["probe"] == "conv2d_kernel_offset"]

    (entry,) = offset_bugs({"candle": "0.11.0"})
    assert entry["framework"] == "candle" and entry["op"] == "conv2d"
    assert offset_bugs(None) == [entry]
    assert offset_bugs({"burn": "0.22.1"}) == [entry]
    assert offset_bugs({"candle": "0.11.1"}) == []

    # Exactly the cases whose candle known bug names releases without 0.11.1 drop out.
    def candle_cases(releases):
        known = report.known_bug_cases("probes", releases)
        return {(k["probe"], k["case"]) for k in known if k["framework"] == "candle"}

    every, newer = candle_cases(None), candle_cases({"candle": "0.11.1"})
    older_only = {
        (name, c["name"])
        for name, p in loader.discover("probes").items()
        for c in p.cases
        if "0.11.1" not in c["known_bug_versions"].get("candle", ["0.11.1"])
    }
    assert ("conv2d_kernel_offset", "narrowed") in older_only
    assert every - newer == older_only & every
    assert ("conv1d_contiguity", "both_strided") in newer


# ----- the campaign's pages, sealed and held by check ---------------------------------------


def _campaign(tmp_path, monkeypatch, settings=None):
    """A PyTorch-only campaign written where the workflow writes it (results/fuzz under
    ``tmp_path``), sealed as the rule seals it; returns (outputs, spec)."""
    from parity.core import paths
    from parity.report import sealed

    known = tmp_path / "known.yaml"
    known.write_text(Path("probes/conv1d_grad.yaml").read_text())
    monkeypatch.chdir(tmp_path)
    settings = settings or {
        "seed": 3,
        "ops": ["matmul"],
        "cases_per_op": 1,
        "frameworks": [],
        "dtypes": ["f32"],
        "shrinks_per_class": 1,
    }
    outputs = {
        "csv": paths.FUZZ_FINDINGS.format(ext="csv"),
        "md": paths.FUZZ_FINDINGS.format(ext="md"),
        "summary": paths.FUZZ_SUMMARY,
        "probes": paths.FUZZ_PROBES,
        "repro": paths.FUZZ_REPRO,
        "record": paths.FUZZ_SOURCES,
    }
    spec = sealed.page_spec("fuzz", [str(known)], settings, "code-1")
    job.fuzz(settings, [], [str(known)], outputs, 1, logging.getLogger("t"), seal=spec)
    return outputs, spec


def test_the_fuzz_job_seals_every_file_it_wrote_last(tmp_path, monkeypatch):
    from parity.core import integrity

    outputs, spec = _campaign(tmp_path, monkeypatch)
    record = integrity.read_sealed_json(outputs["record"])
    assert record["table"] == "fuzz"
    assert sorted(record["tables"]) == ["csv", "md", "summary"]  # no findings: no probes
    assert record["params_sha256"] == spec["params_sha256"] and record["code"] == "code-1"
    assert list(record["made_from"]) == [str(tmp_path / "known.yaml")]
    assert integrity.altered(record["tables"], outputs["record"]) == []
    # the record is the last file written: every sealed file is at least as old
    last = Path(outputs["record"]).stat().st_mtime_ns
    assert all(Path(r["path"]).stat().st_mtime_ns <= last for r in record["tables"].values())


def test_check_holds_the_fuzz_pages_to_their_record_and_warns_naming_the_target(
    tmp_path, monkeypatch
):
    """Current pages: no warning and nothing unverified. Each way they stop being what a
    person may trust is said, one line each, naming ``snakemake fuzz``; check warns rather
    than refuses (its own target does not make them)."""
    from parity.report import check, sealed

    outputs, spec = _campaign(tmp_path, monkeypatch)
    params = check.check_params([], [], {}, other_pages=[spec])
    covered = sealed.recorded_files(check.records(params, probes_record=None))
    assert sealed.other_page_warnings(spec) == []
    assert sealed.unverified(covered) == []

    # a file a person reads edited by hand
    Path(outputs["md"]).write_text("# Layout fuzzer findings\n\nnone, honest\n")
    (said,) = sealed.other_page_warnings(spec)
    assert said.startswith("results/fuzz/findings.md: sha256 ") and said.endswith(
        "(target fuzz: `snakemake fuzz` makes it again)"
    )
    # a probe file dropped into the folder: no record covers it
    Path(outputs["probes"], "mine.yaml").write_text("probe: mine\n")
    assert sealed.unverified(covered) == [
        (
            "results/fuzz/probes/mine.yaml: not verified (no record check holds covers it: made"
            " by another target, such as faults, or left by another config)"
        )
    ]
    # another config's settings, other code, another known-bug folder
    other = sealed.page_spec("fuzz", spec["inputs"], {"seed": 4}, "code-1")
    assert any("was made under another config" in w for w in sealed.other_page_warnings(other))
    other = sealed.page_spec("fuzz", spec["inputs"], None, "code-2")
    assert any("was made by other code" in w for w in sealed.other_page_warnings(other))
    with open(tmp_path / "known.yaml", "a") as f:
        f.write("# a known bug added since\n")
    assert any(
        "is out of date: " in w and "known.yaml changed since" in w
        for w in sealed.other_page_warnings(spec)
    )
    # no record at all (an older version's campaign): the folder is named
    Path(outputs["record"]).unlink()
    assert sealed.other_page_warnings(spec) == [
        (
            "results/fuzz: not sealed (results/fuzz/fuzz.sources.json is missing: made by an "
            "older version, or by hand); `snakemake fuzz`"
        )
    ]


def test_check_says_nothing_of_a_campaign_that_never_ran(tmp_path, monkeypatch):
    from parity.report import sealed

    monkeypatch.chdir(tmp_path)
    spec = sealed.page_spec("fuzz", [], {}, "code")
    assert sealed.other_page_warnings(spec) == []
