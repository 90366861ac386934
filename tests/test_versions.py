"""The version axis (config candle.versions, burn.versions; parity.plan.versions): which runs,
comparisons, binaries and probe cells each release adds, what is refused before the DAG,
and the release matrix (parity.report.versions) on hand-made probe and summary rows. The
real two-release run is tests/test_versions_workflow.py."""

import copy
import csv
import re
import shutil

import pytest

from parity.core.config import ConfigError
from parity.plan import versions
from parity.plan.keys import RunKey
from parity.plan.plan import Plan
from parity.probe.plan import ProbeKey, ProbePlan
from parity.report import versions as report_versions

from conftest import REPO, load_config

M = report_versions


@pytest.fixture
def config():
    c = load_config()
    c["candle"]["versions"] = ["0.11.0", "0.11.1"]
    c["burn"]["versions"] = ["0.22.1"]  # burn's backends: their own section below
    return c


# ----- names and paths -----------------------------------------------------------------


def test_release_suffix_and_labels(config):
    assert versions.suffix("0.11.1") == "_v0_11_1"
    assert versions.suffix("0.12.0-alpha.1") == "_v0_12_0_alpha_1"
    assert versions.label("candle", "0.11.0", config) == "candle"
    assert versions.label("candle", "0.11.1", config) == "candle_v0_11_1"
    assert (
        versions.runner_binary("candle", "0.11.1", "cpu") == "results/bin/candle-parity-0.11.1-cpu"
    )
    assert versions.build_log("burn", "0.22.1", "cpu") == "results/logs/build/burn-0.22.1-cpu.log"


def test_the_default_config_runs_the_studys_release_first_and_the_newest_second():
    c = load_config()
    assert versions.configured(c) == {
        "candle": ["0.11.0", "0.11.1"],
        "burn": ["0.22.1", "0.22.1+flex", "0.23.0-pre.1+flex"],
    }
    assert versions.primary(c, "candle") == versions.pinned("candle") == "0.11.0"
    assert versions.primary(c, "burn") == versions.pinned("burn") == "0.22.1"


# ----- runs and comparisons ------------------------------------------------------------


def test_a_further_release_adds_a_run_per_candle_run_with_its_version(config):
    plan = Plan(config)
    runs = plan.experiments["a3_adamw"]["runs"]
    assert runs["candle"]["version"] == "0.11.0"
    assert runs["candle_v0_11_1"]["version"] == "0.11.1"
    # The same settings but the release: same optimizer, model, record.
    a, b = copy.deepcopy(runs["candle"]), copy.deepcopy(runs["candle_v0_11_1"])
    a.pop("version"), b.pop("version")
    assert a == b
    # burn has one release: no burn_v run.
    assert not [r for r in runs if r.startswith("burn_v")]
    # Every candle run of an experiment gets its twin (the conv1d experiment's too).
    conv = plan.experiments["cnn_adam_conv1d"]["runs"]
    assert {r for r in conv if r.startswith("candle")} == {"candle", "candle_v0_11_1"}


def test_each_release_run_is_its_own_job_with_its_own_binary_and_trace(config):
    plan = Plan(config)
    key = RunKey("a3_adamw", "candle_v0_11_1", "f32", "cpu")
    assert key in plan.runs()
    assert RunKey("a3_adamw", "candle_v0_11_1", "f64", "cpu") in plan.runs()
    assert key.trace == "results/traces/a3_adamw/candle_v0_11_1-f32-cpu.parquet"
    assert plan.binary(key) == "results/bin/candle-parity-0.11.1-cpu"
    assert plan.binary(RunKey("a3_adamw", "candle", "f32", "cpu")) == (
        "results/bin/candle-parity-0.11.0-cpu"
    )
    assert plan.binary(RunKey("a3_adamw", "burn", "f32", "cpu")) == (
        "results/bin/burn-parity-0.22.1-cpu"
    )
    # The trace must say it was made by that release: a binary of another is refused.
    assert plan.trace_expectation(key)["framework_version"] == "0.11.1"
    assert (
        plan.trace_expectation(RunKey("a3_adamw", "candle", "f32", "cpu"))["framework_version"]
        == "0.11.0"
    )


def test_comparisons_with_pytorch_get_a_twin_and_the_release_is_compared_with_the_primary(
    config,
):
    plan = Plan(config)
    comps = {c.name: c for c in plan.comparisons() if c.experiment == "cnn_adam_conv1d"}
    assert set(comps) == {"main", "main_v0_11_1", "candle_v0_11_1_vs_primary"}
    twin = comps["main_v0_11_1"]
    assert (twin.reference.run, twin.candidate.run) == ("torch", "candle_v0_11_1")
    assert twin.expect == "fail"  # the primary's expectation: the conv1d fault
    assert twin.table("perstep") == ("results/tables/cnn_adam_conv1d/perstep-cpu-main_v0_11_1.csv")
    vs = comps["candle_v0_11_1_vs_primary"]
    assert (vs.reference.run, vs.candidate.run, vs.expect) == ("candle", "candle_v0_11_1", "pass")
    assert vs.tolerance == float(config["tolerance"])
    assert vs.f64_pair == (
        RunKey("cnn_adam_conv1d", "candle", "f64", "cpu"),
        RunKey("cnn_adam_conv1d", "candle_v0_11_1", "f64", "cpu"),
    )
    # A comparison without PyTorch (candle against burn) has no twin.
    a3 = {c.name for c in plan.comparisons() if c.experiment == "a3_adamw"}
    assert "burn_candle" in a3 and not [n for n in a3 if n.startswith("burn_candle_v")]
    assert {"main_v0_11_1", "foreach_v0_11_1", "fused_v0_11_1"} <= a3


def test_a_comparison_can_expect_otherwise_for_a_release(config):
    exp = config["experiments"]["cnn_adam_conv1d"]
    exp.setdefault("comparisons", {})["main"] = {
        "reference": "torch",
        "candidate": "candle",
        "expect": "fail",
        "versions": {"0.11.1": {"expect": "pass", "tolerance": 2e-6}},
    }
    comps = {c.name: c for c in Plan(config).comparisons() if c.experiment == "cnn_adam_conv1d"}
    assert comps["main"].expect == "fail"
    assert (comps["main_v0_11_1"].expect, comps["main_v0_11_1"].tolerance) == ("pass", 2e-6)
    # A release that fixes what the primary fails must differ from the primary.
    assert comps["candle_v0_11_1_vs_primary"].expect == "fail"


def test_a_primary_only_config_is_the_config_without_versions(config):
    config["candle"]["versions"] = ["0.11.0"]
    config["burn"]["versions"] = ["0.22.1"]
    plan = Plan(config)
    assert not [k for k in plan.runs() if "_v0_" in k.run]
    assert not [c for c in plan.comparisons() if "_v0_" in c.name]


def test_an_override_for_a_release_no_one_can_build_or_the_primary_is_refused(config):
    config["candle"]["versions"] = ["0.11.0"]
    config["burn"]["versions"] = ["0.22.1"]
    for v in ("0.11.2", "0.11.0"):  # no lock file; the primary release
        config["experiments"]["a3_sgd"]["comparisons"] = {
            "main": {"reference": "torch", "candidate": "candle", "versions": {v: {}}}
        }
        with pytest.raises(
            ConfigError,
            match=rf"a3_sgd\.comparisons\.main\.versions: {re.escape(v)} is not "
            r"a further release of candle here \(candle: 0\.11\.0; burn: 0\.22\.1\)",
        ):
            Plan(config)


def test_an_override_for_a_buildable_release_not_listed_waits_unused(config):
    # A config that narrows the releases keeps the default config's overrides (the
    # transformer's Flex twins expect a pass): they apply once the release is listed.
    config["candle"]["versions"] = ["0.11.0"]
    config["burn"]["versions"] = ["0.22.1"]
    config["experiments"]["a3_sgd"]["comparisons"] = {
        "main": {"reference": "torch", "candidate": "candle", "versions": {"0.11.1": {}}}
    }
    comps = {c.name for c in Plan(config).comparisons() if c.experiment == "a3_sgd"}
    assert "main" in comps and not [n for n in comps if "_v0_" in n]
    assert versions.buildable("burn", "0.23.0-pre.1+flex")
    for fw, entry in [
        ("burn", "0.23.0-pre.1"),  # no lock file: 0.23 has no ndarray
        ("burn", "0.22.1+ndarray"),  # the default, spelled out
        ("burn", "0.22.1+tch"),
        ("candle", "0.11.1+flex"),
    ]:
        assert not versions.buildable(fw, entry), entry
    tf = load_config()["experiments"]["transformer_adamw"]["comparisons"]["burn"]
    assert set(tf["versions"]) == {"0.22.1+flex", "0.23.0-pre.1+flex"}


def test_a_run_named_like_a_generated_one_is_refused(config):
    config["experiments"]["a3_sgd"].setdefault("runs", {})
    runs = config["experiments"]["a3_sgd"]["runs"]
    runs.update({"torch": {}, "candle": {}, "candle_v0_11_1": {}})
    with pytest.raises(ConfigError, match=r"candle_v0_11_1: the name is taken by candle 0\.11\.1"):
        Plan(config)


# ----- burn's backends ---------------------------------------------------------------------


def test_a_burn_entry_names_its_backend_as_build_metadata():
    assert versions.release("0.22.1+flex") == versions.release("0.22.1") == "0.22.1"
    assert versions.release("0.23.0-pre.1+flex") == "0.23.0-pre.1"
    assert versions.backend("burn", "0.22.1") == "ndarray"  # the default backend
    assert versions.backend("burn", "0.23.0-pre.1+flex") == "flex"
    assert versions.backend("candle", "0.11.1") is None  # candle has no backend axis
    assert versions.display("burn", "0.22.1") == "0.22.1 ndarray"
    assert versions.display("burn", "0.22.1+flex") == "0.22.1 flex"
    assert versions.display("candle", "0.11.1") == "0.11.1"
    assert versions.suffix("0.22.1+flex") == "_v0_22_1_flex"
    assert versions.suffix("0.23.0-pre.1+flex") == "_v0_23_0_pre_1_flex"
    assert versions.cargo_features("burn", "0.22.1") == [
        "--no-default-features",
        "--features",
        "ndarray",
    ]
    assert versions.cargo_features("burn", "0.22.1+flex")[-1] == "flex"
    assert versions.cargo_features("candle", "0.11.1") == []
    # The pinned release's lock file locks every backend; another release's is its own.
    assert versions.lock_file("burn", "0.22.1+flex") == "Cargo.lock"
    assert versions.lock_file("burn", "0.23.0-pre.1+flex") == "versions/burn-0.23.0-pre.1+flex.lock"
    assert re.fullmatch(versions.VERSION_PATTERN, "0.23.0-pre.1+flex")
    assert versions.runner_binary("burn", "0.22.1+flex", "cpu") == (
        "results/bin/burn-parity-0.22.1+flex-cpu"
    )


def test_each_burn_backend_is_a_release_of_its_own_with_its_runs_and_comparisons():
    config = load_config()
    plan = Plan(config)
    runs = plan.experiments["cnn_adam"]["runs"]
    assert runs["burn_v0_22_1_flex"]["version"] == "0.22.1+flex"
    assert runs["burn_v0_23_0_pre_1_flex"]["version"] == "0.23.0-pre.1+flex"
    key = RunKey("cnn_adam", "burn_v0_22_1_flex", "f64", "cpu")
    assert plan.binary(key) == "results/bin/burn-parity-0.22.1+flex-cpu"
    # The binary must report the backend it was built with, not only the release.
    assert plan.trace_expectation(key)["framework_version"] == "0.22.1+flex"
    comps = {c.name: c for c in plan.comparisons() if c.experiment == "cnn_adam"}
    assert {"burn_v0_22_1_flex", "burn_v0_22_1_flex_vs_primary"} <= set(comps)
    vs = comps["burn_v0_23_0_pre_1_flex_vs_primary"]
    assert (vs.reference.run, vs.candidate.run) == ("burn", "burn_v0_23_0_pre_1_flex")
    assert versions.check(config, REPO / "rust") == []


def test_a_backend_burn_lacks_or_spelled_twice_is_refused(tmp_path):
    rust = tmp_path / "rust"
    shutil.copytree(REPO / "rust", rust, ignore=shutil.ignore_patterns("target"))
    # A lock of burn 0.23 made for Flex, listed for the default backend (ndarray).
    flex = rust / "versions" / "burn-0.23.0-pre.1+flex.lock"
    (rust / "versions" / "burn-0.23.0-pre.1.lock").write_text(flex.read_text())
    config = load_config()
    config["candle"]["versions"] = ["0.11.0", "0.11.1+flex"]
    config["burn"]["versions"] = ["0.22.1", "0.22.1+tch", "0.22.1+ndarray", "0.23.0-pre.1"]
    got = [str(p) for p in versions.check(config, rust)]
    assert got == [
        (
            "config: candle.versions[1]: candle has no backend 'flex' here (only burn's "
            "releases name a backend, e.g. 0.22.1+flex)"
        ),
        "config: burn.versions[1]: burn has no backend 'tch' here (its backends: ndarray, flex)",
        (
            "config: burn.versions[2]: ndarray is burn's default backend: write 0.22.1 "
            "(one spelling per build)"
        ),
        (
            "config: burn.versions[3]: rust/versions/burn-0.23.0-pre.1.lock locks burn-ndarray "
            "not at all, not 0.23.0-pre.1: burn 0.23.0-pre.1 has no ndarray backend here "
            "(try 0.23.0-pre.1+flex)"
        ),
    ]


def test_the_committed_lock_of_burn_0_23_locks_flex_and_no_ndarray():
    held = versions.locked_versions(REPO / "rust" / "versions" / "burn-0.23.0-pre.1+flex.lock")
    assert held["burn"] == held["burn-flex"] == {"0.23.0-pre.1"}
    assert "burn-ndarray" not in held
    # candle keeps the pinned release: only burn's side moved.
    assert held["candle-core"] == {"0.11.0"}
    # rust/Cargo.lock locks both of 0.22.1's backends.
    pinned = versions.locked_versions(REPO / "rust" / "Cargo.lock")
    assert pinned["burn-ndarray"] == pinned["burn-flex"] == {"0.22.1"}


def test_a_staged_burn_release_keeps_only_its_backends_feature():
    text = (REPO / "rust" / "burn-parity" / "Cargo.toml").read_text()
    assert 'ndarray = ["burn/ndarray"]' in text and 'flex = ["burn/flex"]' in text
    out = versions.runner_manifest(text, "burn", "0.23.0-pre.1+flex")
    assert 'default = ["flex"]' in out and 'flex = ["burn/flex"]' in out
    assert "burn/ndarray" not in out  # burn 0.23's facade has no such feature
    assert 'version = "=0.23.0-pre.1"' in out and "=0.22.1" not in out
    with pytest.raises(ValueError, match=r"no one feature line ndarray = \[\.\.\.\]"):
        versions.runner_manifest(out, "burn", "0.23.0-pre.1")


# ----- what is refused before the DAG ----------------------------------------------------


def test_a_release_without_its_lock_file_is_refused_with_the_command_that_makes_it(config):
    config["candle"]["versions"] = ["0.11.0", "0.11.9"]
    (problem,) = versions.check(config, REPO / "rust")
    assert problem.path == "candle.versions[1]"
    assert "candle 0.11.9 has no lock file rust/versions/candle-0.11.9.lock" in str(problem)
    assert "scripts/dev/lock-version candle 0.11.9" in str(problem)


def test_malformed_repeated_and_mislocked_releases_are_refused(config, tmp_path):
    rust = tmp_path / "rust"
    shutil.copytree(REPO / "rust", rust, ignore=shutil.ignore_patterns("target"))
    # A lock file that locks candle-core at another release than its name says.
    text = (rust / "versions" / "candle-0.11.1.lock").read_text()
    (rust / "versions" / "candle-0.11.2.lock").write_text(text)
    config["candle"]["versions"] = ["0.11.0", "latest", "0.11.0", "0.11.2"]
    got = [str(p) for p in versions.check(config, rust)]
    assert got == [
        "config: candle.versions[1]: 'latest' is not a release (e.g. 0.11.1)",
        "config: candle.versions[2]: 0.11.0 is listed twice",
        (
            "config: candle.versions[3]: rust/versions/candle-0.11.2.lock locks candle-core "
            "0.11.1, not 0.11.2"
        ),
        (
            "config: candle.versions[3]: rust/versions/candle-0.11.2.lock locks candle-nn "
            "0.11.1, not 0.11.2"
        ),
    ]
    assert versions.check(load_config(), REPO / "rust") == []


def test_the_committed_lock_of_0_11_1_locks_both_candle_crates_there():
    held = versions.locked_versions(REPO / "rust" / "versions" / "candle-0.11.1.lock")
    assert held["candle-core"] == {"0.11.1"} and held["candle-nn"] == {"0.11.1"}
    # Resolved from Cargo.lock: the workspace's own dependencies and burn keep their versions.
    pinned = versions.locked_versions(REPO / "rust" / "Cargo.lock")
    for crate in ("anyhow", "clap", "serde", "serde_json", "half", "burn"):
        assert held[crate] == pinned[crate], crate
    assert held["burn"] == {"0.22.1"}


@pytest.mark.parametrize("lock", ["Cargo.lock", "versions/candle-0.11.1.lock"])
def test_a_lock_file_is_read_as_its_toml_says(lock):
    """The line scan of a cargo-written lock gives what a TOML parse of it gives."""
    import tomllib

    path = REPO / "rust" / lock
    parsed: dict[str, set[str]] = {}
    for pkg in tomllib.loads(path.read_text())["package"]:
        parsed.setdefault(pkg["name"], set()).add(pkg["version"])
    assert versions.locked_versions(path) == parsed


def test_a_hand_written_lock_is_parsed_as_toml_and_a_broken_one_refused(tmp_path):
    # version before name: not cargo's order, so the scan steps aside for the TOML parser
    lock = tmp_path / "Cargo.lock"
    lock.write_text(
        '[[package]]\nname = "a"\nversion = "1.0.0"\n\n[[package]]\nversion = "2.0.0"\nname = "b"\n'
    )
    assert versions.locked_versions(lock) == {"a": {"1.0.0"}, "b": {"2.0.0"}}
    lock.write_text('[[package]]\nname = "a"\nversion = \n')
    with pytest.raises(ValueError, match=r"not a readable Cargo\.lock"):
        versions.locked_versions(lock)


def test_the_runner_manifest_of_a_release_requires_it_exactly():
    text = (REPO / "rust" / "candle-parity" / "Cargo.toml").read_text()
    out = versions.runner_manifest(text, "candle", "0.11.1")
    assert 'candle-core = "=0.11.1"' in out and 'candle-nn = "=0.11.1"' in out
    assert "0.11.0" not in out
    with pytest.raises(ValueError, match=re.escape('0 requirements candle-core = "=0.11.0"')):
        versions.runner_manifest(out, "candle", "0.11.2")


def test_a_staged_workspace_holds_the_release_and_its_lock(tmp_path):
    files = ["Cargo.toml", "candle-parity/Cargo.toml", "parity-common/Cargo.toml"]
    manifest = versions.stage(REPO / "rust", files, "candle", "0.11.1", tmp_path / "ws")
    assert manifest == tmp_path / "ws" / "Cargo.toml"
    assert (tmp_path / "ws" / "Cargo.lock").read_bytes() == (
        REPO / "rust" / "versions" / "candle-0.11.1.lock"
    ).read_bytes()
    assert (
        'candle-core = "=0.11.1"' in (tmp_path / "ws" / "candle-parity" / "Cargo.toml").read_text()
    )
    # A second staging with the same content leaves the files (cargo fingerprints their times).
    before = (tmp_path / "ws" / "Cargo.lock").stat().st_mtime_ns
    versions.stage(REPO / "rust", files, "candle", "0.11.1", tmp_path / "ws")
    assert (tmp_path / "ws" / "Cargo.lock").stat().st_mtime_ns == before


def test_a_staged_release_is_what_parity_common_s_own_model_trait_links_too(tmp_path):
    # candle-parity enables parity-common's `candle` feature (the own-model trait): its
    # optional candle crates must follow the staged release, or one build links two candles.
    files = ["Cargo.toml", "candle-parity/Cargo.toml", "parity-common/Cargo.toml"]
    versions.stage(REPO / "rust", files, "candle", "0.11.1", tmp_path / "ws")
    common = (tmp_path / "ws" / "parity-common" / "Cargo.toml").read_text()
    assert 'candle-core = { version = "=0.11.1", optional = true }' in common
    assert 'candle-nn = { version = "=0.11.1", optional = true }' in common
    assert "0.11.0" not in common
    with pytest.raises(ValueError, match=r"parity-common/Cargo\.toml: candle-core is pinned"):
        versions.runner_manifest(
            common.replace("=0.11.1", "=0.10.2"), "candle", "0.11.1", "parity-common/Cargo.toml"
        )
    lock = (REPO / "rust" / "versions" / "candle-0.11.1.lock").read_text()
    entry = lock[lock.index('name = "parity-common"') :].split("[[package]]")[0]
    assert '"candle-core"' in entry and '"candle-nn"' in entry


def test_a_file_the_workspace_no_longer_has_leaves_the_staged_copy(tmp_path):
    # A module moved from spec.rs to spec/mod.rs: a staging that kept the old file would
    # hold both, and rustc refuses a module found twice (E0761).
    rust = tmp_path / "rust"
    shutil.copytree(REPO / "rust", rust, ignore=shutil.ignore_patterns("target"))
    ws = tmp_path / "ws"
    old = ["Cargo.toml", "candle-parity/Cargo.toml", "parity-common/Cargo.toml"]
    (rust / "parity-common" / "src" / "gone.rs").write_text("// moved\n")
    versions.stage(rust, [*old, "parity-common/src/gone.rs"], "candle", "0.11.1", ws)
    (rust / "parity-common" / "src" / "gone.rs").unlink()
    (rust / "parity-common" / "src" / "gone").mkdir()
    (rust / "parity-common" / "src" / "gone" / "mod.rs").write_text("// here now\n")
    versions.stage(rust, [*old, "parity-common/src/gone/mod.rs"], "candle", "0.11.1", ws)
    assert not (ws / "parity-common" / "src" / "gone.rs").exists()
    assert (ws / "parity-common" / "src" / "gone" / "mod.rs").read_text() == "// here now\n"
    assert sorted(p.relative_to(ws).as_posix() for p in ws.rglob("*") if p.is_file()) == sorted(
        [*old, "Cargo.lock", "parity-common/src/gone/mod.rs"]
    )


def test_a_build_failure_is_named_with_cargos_error_lines(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    log = tmp_path / versions.build_log("candle", "0.11.1", "cpu")
    log.parent.mkdir(parents=True)
    log.write_text(
        "   Compiling candle-core v0.11.1\n"
        "error[E0599]: no method named `conv1d_with_algo` found for struct `Tensor`\n"
        "  --> candle-parity/src/model.rs:12:5\n"
        "error[E0599]: no method named `conv1d_with_algo` found for struct `Tensor`\n"
        "error: could not compile `candle-parity` (lib) due to 1 previous error\n"
    )
    why = versions.build_failure("candle", "0.11.1", "cpu")
    assert why == (
        "the candle 0.11.1 runner for cpu did not build (cargo: error[E0599]: no method named "
        "`conv1d_with_algo` found for struct `Tensor`; error: could not compile `candle-parity` "
        "(lib) due to 1 previous error); see results/logs/build/candle-0.11.1-cpu.log"
    )
    # A binary that is there, or a build never tried, is no build failure.
    assert versions.build_failure("candle", "0.11.0", "cpu") is None
    binary = tmp_path / versions.runner_binary("candle", "0.11.1", "cpu")
    binary.parent.mkdir(parents=True)
    binary.write_text("")
    assert versions.build_failure("candle", "0.11.1", "cpu") is None


# ----- probes ----------------------------------------------------------------------------


def test_a_further_release_probes_every_probe_in_a_batch_of_its_own(config):
    config["devices"] = ["cpu"]
    config["probes"] = {"select": ["conv1d_grad"], "dtypes": ["f32", "f64"]}
    plan = ProbePlan.from_config(config, REPO)
    key = ProbeKey("conv1d_grad", "candle", "f32", "cpu", "0.11.1")
    assert key.runner == "candle_v0_11_1"
    assert key.result == "results/probes/conv1d_grad/candle_v0_11_1-f32-cpu.parquet"
    assert key in plan.jobs()
    batches = plan.batches()
    assert ("candle_v0_11_1", "f64", "cpu") in batches
    assert ("burn_v0_22_1", "f32", "cpu") not in batches
    assert plan.version_of(key) == "0.11.1"
    assert plan.version_of(ProbeKey("conv1d_grad", "candle", "f32", "cpu")) == "0.11.0"
    assert plan.version_of(ProbeKey("conv1d_grad", "torch", "f32", "cpu")) == ""
    assert plan.release_of("candle_v0_11_1") == ("candle", "0.11.1")
    assert plan.release_of("candle") == ("candle", "")
    with pytest.raises(KeyError, match="no probe runner 'candle_v0_12_0'"):
        plan.release_of("candle_v0_12_0")
    # The plan survives a job's params.
    again = ProbePlan.from_params(plan.to_params())
    assert again.batches() == batches


def test_a_known_bug_may_name_the_releases_it_is_in(tmp_path):
    from parity.probe import loader

    path = tmp_path / "p.yaml"
    path.write_text(
        "description: d\n"
        "inputs: {x: {values: [1.0, -1.0], requires_grad: true}}\n"
        "cases:\n"
        "  c:\n"
        "    steps: [{relu: {in: x, out: y}}]\n"
        "    compare: [y]\n"
        "    known_bug: {candle: {versions: [0.11.0], cpu: {y: [1.0, 1.0]}}}\n"
    )
    case = loader.load(path).case("c")
    assert case["known_bug_versions"] == {"candle": ["0.11.0"]}
    assert case["known_bug"]["candle"]["cpu"]["y"] is not None


# ----- the matrix on hand-made rows ------------------------------------------------------

RELEASES = {"candle": ["0.11.0", "0.11.1"], "burn": ["0.22.1"]}


def _params(known_bugs, comparisons=()):
    return {"releases": RELEASES, "comparisons": list(comparisons), "known_bugs": known_bugs}


def _probe_row(case, version, verdict, quantity="w.grad", framework="candle", **over):
    row = {
        "probe": "conv1d_grad",
        "case": case,
        "quantity": quantity,
        "framework": framework,
        "version": version,
        "device": "cpu",
        "dtype": "f32",
        "values": "[220.0, 256.0]" if verdict == "known-bug" else "[340.0, 392.0]",
        "reference": "exact",
        "max_diff": "120.0" if verdict == "known-bug" else "0.0",
        "verdict": verdict,
        "note": "",
    }
    row.update(over)
    return row


BUG = {"conv1d_grad": {"batch2": {"candle": {"where": {"cpu": ["w.grad"]}, "versions": None}}}}


def _cells(rows, subject, dtype=None):
    (r,) = [r for r in rows if r["subject"] == subject and dtype in (None, r["dtype"])]
    return r["candle 0.11.0"], r["candle 0.11.1"], r


def test_a_bug_both_releases_reproduce_and_one_a_release_fixes():
    probe_rows = [
        _probe_row("batch2", "0.11.0", "known-bug"),
        _probe_row("batch2", "0.11.0", "pass", quantity="loss", values="[-84.0]"),
        _probe_row("batch2", "0.11.1", "known-bug-fixed"),
        _probe_row("batch2", "0.11.1", "pass", quantity="loss", values="[-84.0]"),
        # A case without a bug that both pass is no row.
        _probe_row("batch1", "0.11.0", "pass"),
        _probe_row("batch1", "0.11.1", "pass"),
    ]
    rows = M.matrix_rows(_params(BUG), [], probe_rows)
    old, new, row = _cells(rows, "conv1d_grad/batch2")
    assert (old, new) == ("reproduced", "fixed")
    assert row["known"] == "known bug (no release named)"
    assert row["candle 0.11.0 detail"] == ("w.grad = [220, 256] (known-bug, max|Δ| vs exact 120)")
    # The fixed release's detail gives the values it now has.
    assert row["candle 0.11.1 detail"] == (
        "w.grad = [340, 392] (known-bug-fixed, max|Δ| vs exact 0)"
    )
    assert [r["subject"] for r in rows] == ["conv1d_grad/batch2"]


def test_a_bug_named_for_the_old_release_only_is_fixed_where_the_new_one_passes():
    bug = {
        "conv1d_grad": {
            "batch2": {"candle": {"where": {"cpu": ["w.grad"]}, "versions": ["0.11.0"]}}
        }
    }
    probe_rows = [
        _probe_row("batch2", "0.11.0", "known-bug"),
        _probe_row("batch2", "0.11.1", "pass"),
    ]
    old, new, row = _cells(M.matrix_rows(_params(bug), [], probe_rows), "conv1d_grad/batch2")
    assert (old, new) == ("reproduced", "fixed")
    assert row["known"] == "known bug in 0.11.0"
    assert row["candle 0.11.1 detail"] == "w.grad = [340, 392] (pass, max|Δ| vs exact 0)"


def test_new_failures_unsupported_and_missing_cells():
    probe_rows = [
        _probe_row("batch1", "0.11.0", "pass"),
        _probe_row("batch1", "0.11.1", "fail", note="max|Δ| 3.0 > 0.0"),
        _probe_row("batch2", "0.11.0", "known-bug"),
        _probe_row("batch2", "0.11.1", "error", note="no current result; see the log"),
        _probe_row("half", "0.11.0", "unsupported", note="no bf16 matmul", dtype="bf16"),
        _probe_row("half", "0.11.1", "unsupported", note="no bf16 matmul", dtype="bf16"),
    ]
    bug = {
        "conv1d_grad": {
            "batch2": {"candle": {"where": {"cpu": ["w.grad"]}, "versions": None}},
            "half": {"candle": {"where": {"cpu-bf16": ["w.grad"]}, "versions": None}},
        }
    }
    rows = M.matrix_rows(_params(bug), [], probe_rows)
    old, new, row = _cells(rows, "conv1d_grad/batch1")
    assert (old, new, row["known"]) == ("pass", "new failure", "")
    assert row["candle 0.11.1 detail"] == "w.grad: fail: max|Δ| 3.0 > 0.0"
    assert _cells(rows, "conv1d_grad/batch2")[:2] == ("reproduced", "missing")
    old, new, row = _cells(rows, "conv1d_grad/half", "bf16")
    assert (old, new) == ("unsupported", "unsupported")
    assert row["candle 0.11.1 detail"] == "no bf16 matmul"


def test_a_bug_whose_quantity_a_release_cannot_run_is_unsupported_there():
    probe_rows = [
        _probe_row("batch2", "0.11.0", "unsupported", note="no bf16 matmul"),
        _probe_row("batch2", "0.11.0", "pass", quantity="loss", values="[-84.0]"),
        _probe_row("batch2", "0.11.1", "known-bug"),
        _probe_row("batch2", "0.11.1", "pass", quantity="loss", values="[-84.0]"),
    ]
    old, new, row = _cells(M.matrix_rows(_params(BUG), [], probe_rows), "conv1d_grad/batch2")
    assert (old, new) == ("unsupported", "reproduced")
    assert row["candle 0.11.0 detail"] == "no bf16 matmul"


def test_a_case_the_releases_disagree_on_is_a_row_without_a_known_bug():
    # A release that adds an op (bf16 matmul) where no bug is recorded.
    probe_rows = [
        _probe_row("batch1", "0.11.0", "unsupported", note="no bf16 matmul", dtype="bf16"),
        _probe_row("batch1", "0.11.1", "pass", dtype="bf16"),
    ]
    old, new, row = _cells(M.matrix_rows(_params({}), [], probe_rows), "conv1d_grad/batch1", "bf16")
    assert (old, new, row["known"]) == ("unsupported", "pass", "")


def test_an_error_a_bug_records_is_detailed_by_its_message():
    bug = {"conv1d_grad": {"batch2": {"candle": {"where": {"cpu": ["w.grad"]}, "versions": None}}}}
    row = _probe_row("batch2", "0.11.0", "known-bug", values="", max_diff="")
    row["note"] = "index-add only supports contiguous tensors"
    (r,) = M.matrix_rows(_params(bug), [], [row])
    assert r["candle 0.11.0 detail"] == (
        "w.grad: known-bug (index-add only supports contiguous tensors)"
    )


def test_a_bug_recorded_for_another_device_does_not_make_a_row():
    bug = {
        "conv1d_grad": {"batch2": {"candle": {"where": {"metal": ["w.grad"]}, "versions": None}}}
    }
    probe_rows = [_probe_row("batch2", v, "pass") for v in ("0.11.0", "0.11.1")]
    assert M.matrix_rows(_params(bug), [], probe_rows) == []


def test_experiment_rows_from_the_summary():
    comparisons = [
        {
            "experiment": "cnn_adam_conv1d",
            "comparison": "main",
            "device": "cpu",
            "framework": "candle",
            "expect": "fail",
            "cells": {"0.11.0": "main", "0.11.1": "main_v0_11_1"},
        },
        {
            "experiment": "a3_adamw",
            "comparison": "main",
            "device": "cpu",
            "framework": "candle",
            "expect": "pass",
            "cells": {"0.11.0": "main", "0.11.1": "main_v0_11_1"},
        },
        {
            "experiment": "a3_sgd",
            "comparison": "main",
            "device": "cpu",
            "framework": "candle",
            "expect": "pass",
            "cells": {"0.11.0": "main", "0.11.1": "main_v0_11_1"},
        },
    ]

    def s(exp, name, verdict, worst="1.15"):
        return {
            "experiment": exp,
            "comparison": name,
            "device": "cpu",
            "verdict": verdict,
            "worst_dparam": worst,
            "worst_step": "100",
            "tolerance": "1e-06",
            "status": "",
        }

    summary = [
        s("cnn_adam_conv1d", "main", "expected-fail"),
        s("cnn_adam_conv1d", "main_v0_11_1", "unexpected-pass", "4.1e-07"),
        s("a3_adamw", "main", "pass", "4.8e-07"),
        s("a3_adamw", "main_v0_11_1", "fail", "2.0e-03"),
        s("a3_sgd", "main", "pass", "3e-08"),
        s("a3_sgd", "main_v0_11_1", "pass", "3e-08"),
    ]
    rows = M.matrix_rows(_params({}, comparisons), summary, [])
    old, new, row = _cells(rows, "cnn_adam_conv1d/main")
    assert (old, new, row["known"]) == ("reproduced", "fixed", "expected to fail")
    assert row["candle 0.11.0 detail"] == (
        "expected-fail: worst |Δparam| 1.15 at step 100 (tolerance 1e-06)"
    )
    assert _cells(rows, "a3_adamw/main")[:2] == ("pass", "new failure")
    # A comparison that passes in every release, as expected, is no row.
    assert [r["subject"] for r in rows] == ["cnn_adam_conv1d/main", "a3_adamw/main"]


def test_the_plan_hands_the_matrix_job_each_comparison_and_its_release_twins(config):
    config["probes"] = {"select": ["conv1d_grad"], "dtypes": ["f32"]}
    plan = Plan(config)
    params = M.plan_params(plan, ProbePlan.from_config(config, REPO))
    assert params["releases"] == {"candle": ["0.11.0", "0.11.1"], "burn": ["0.22.1"]}
    conv = [c for c in params["comparisons"] if c["experiment"] == "cnn_adam_conv1d"]
    assert conv == [
        {
            "experiment": "cnn_adam_conv1d",
            "comparison": "main",
            "device": "cpu",
            "framework": "candle",
            "expect": "fail",
            "cells": {"0.11.0": "main", "0.11.1": "main_v0_11_1"},
        }
    ]
    # Twins and comparisons with the primary are cells, not rows; burn's have one cell.
    names = {c["comparison"] for c in params["comparisons"]}
    assert not [n for n in names if "_v0_" in n]
    burn = [c for c in params["comparisons"] if c["framework"] == "burn"]
    assert burn and all(list(c["cells"]) == ["0.22.1"] for c in burn)
    assert params["known_bugs"]["conv1d_grad"]["batch2"]["candle"] == {
        "where": {"cpu": ["w.grad"], "cpu-f16": ["loss"]},
        "versions": None,
    }


def test_the_matrix_files_and_their_markdown(tmp_path):
    import csv
    import logging

    probe_rows = [
        _probe_row("batch2", "0.11.0", "known-bug"),
        _probe_row("batch2", "0.11.1", "known-bug"),
    ]
    summary_csv, probes_csv = tmp_path / "summary.csv", tmp_path / "probes.csv"
    summary_csv.write_text("experiment,comparison,device,verdict\n")
    with open(probes_csv, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(probe_rows[0]))
        w.writeheader()
        w.writerows(probe_rows)
    out_csv, out_md = tmp_path / "versions.csv", tmp_path / "versions.md"
    M.versions_table(
        _params(BUG),
        str(summary_csv),
        str(probes_csv),
        str(out_csv),
        str(out_md),
        logging.getLogger("test"),
    )
    with open(out_csv, encoding="utf-8") as f:
        (row,) = list(csv.DictReader(f))
    assert list(row) == M.columns(RELEASES)
    assert (row["candle 0.11.0"], row["candle 0.11.1"], row["burn 0.22.1 ndarray"]) == (
        "reproduced",
        "reproduced",
        "",
    )
    md = out_md.read_text()
    assert "## candle" in md and "**reproduced**" in md
    assert "## burn\n\nNo known fault and no failure in any release." in md
    assert (tmp_path / "versions.html").exists()


def test_a_release_that_did_not_build_is_named_in_the_partial_summary_and_probe_table(
    config, tmp_path, monkeypatch
):
    from parity.probe import table as probes_table
    from parity.report import partial

    for name, exp in config["experiments"].items():
        exp["enabled"] = name == "a3_sgd"
    config["framework_summary"] = []
    config["probes"] = {"select": ["conv1d_grad"], "dtypes": ["f32"]}
    config["dtypes"] = ["f32"]
    plan = Plan(config)
    probe_plan = ProbePlan.from_config(config, REPO)
    monkeypatch.chdir(tmp_path)
    log = tmp_path / versions.build_log("candle", "0.11.1", "cpu")
    log.parent.mkdir(parents=True)
    log.write_text("error[E0425]: cannot find function `conv1d_single_group`\n")
    jobs = [(c, plan.comparison_job(c)) for c in plan.comparisons()]
    partial.partial_summary(jobs, plan.unsupported_params(), {}, "s.csv", "s.md", "s.sources.json")
    with open("s.csv", encoding="utf-8") as f:
        status = {r["comparison"]: r["status"] for r in csv.DictReader(f)}
    cargo = (
        "the candle 0.11.1 runner for cpu did not build (cargo: error[E0425]: cannot find "
        "function `conv1d_single_group`); see results/logs/build/candle-0.11.1-cpu.log"
    )
    # Every comparison of the release names the build, not a missing trace.
    assert status["main_v0_11_1"] == f"no current result: {cargo}"
    assert status["candle_v0_11_1_vs_primary"] == f"no current result: {cargo}"
    # The primary's comparisons lack traces only because nothing ran here.
    assert status["main"].endswith("(run torch f32 cpu failed: its trace is missing)")
    results, errors, _ = probes_table.gather(probe_plan)
    rows = probes_table.table_rows(probe_plan, results, errors)
    notes = {(r["framework"], r["version"]): r["note"] for r in rows if r["verdict"] == "error"}
    assert notes[("candle", "0.11.1")] == f"no current result: {cargo}"
    assert notes[("candle", "0.11.0")].startswith("no current result (")
