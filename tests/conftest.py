"""Shared test helpers: hand-made traces and a runner for the real workflow."""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from parity.core import integrity
from parity.core.configcheck import merge_changes
from parity.core.fileio import exclusive_lock
from parity.plan import versions
from parity.trace.schema import TraceLayout
from parity.trace.writer import TraceWriter

REPO = Path(__file__).resolve().parents[1]
SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))


def use_our_parity_common(manifest: Path) -> None:
    """Points a port crate copied out of the repository (its ``Cargo.toml``, ``manifest``)
    at this checkout's ``rust/parity-common``, as a user's crate names theirs. Raises
    ``ValueError`` when the manifest has no ``parity-common = { path = … }`` dependency."""
    ours = REPO / "rust" / "parity-common"
    text, n = re.subn(
        r'parity-common = \{ path = "[^"]*"',
        f'parity-common = {{ path = "{ours}"',
        manifest.read_text(),
    )
    if n != 1:
        raise ValueError(f"{manifest}: no parity-common path dependency to point")
    manifest.write_text(text)


def base_meta(**over) -> dict:
    """Metadata for a hand-made trace (every required field)."""
    meta = {
        "experiment": "hand",
        "run": "torch",
        "framework": "torch",
        "framework_version": "test",
        "device": "cpu",
        "host": "testhost",
        "optimizer": {"name": "sgd", "lr": 0.1},
        "fixture_sha256": "0" * 64,
        "config_hash": "1" * 64,
        "steps": 2,
        "record_every": 1,
        "runner": {},
    }
    meta.update(over)
    if "framework_version" not in over and meta["framework"] == "torch":
        # A PyTorch run's expected trace names the installed torch release.
        meta["framework_version"] = versions.torch_version() or "test"
    if "framework_version" not in over and meta["framework"] in ("candle", "burn"):
        # A Rust run's expected trace names the release its binary was built from.
        meta["framework_version"] = versions.pinned(meta["framework"])
    if meta["framework"] in ("candle", "burn") and "source_id" not in meta["runner"]:
        # ... and the build that made it, as this checkout and config.yaml build it.
        fw, version, device = meta["framework"], meta["framework_version"], meta["device"]
        meta["runner"] = {**meta["runner"], "source_id": _source_id(fw, version, device)}
    return meta


@functools.cache
def _source_id(framework: str, version: str, device: str) -> str | None:
    """The source id this checkout and config.yaml build for a runner release (None for a
    release it cannot build: a hand-made trace of a made-up version)."""
    from parity.plan import builds

    try:
        return builds.runner_build(load_config(), framework, version, device)["source_id"]
    except (OSError, ValueError):
        return None


def write_trace(path, steps_values, dtype="f32", losses=None, shapes=None, **meta):
    """Write a trace whose step k holds ``steps_values[k]`` (dict name → array).

    ``shapes`` defaults to the 1-D shape of each array at step 0.
    """
    first = steps_values[0]
    shapes = shapes or {n: (np.asarray(v).size,) for n, v in first.items()}
    layout = TraceLayout.of(dtype, list(shapes.items()))
    np_dtype = np.float32 if dtype == "f32" else np.float64
    losses = losses or [None] + [1.0] * (len(steps_values) - 1)
    m = base_meta(steps=len(steps_values) - 1, **meta)
    with TraceWriter(path, layout, m) as w:
        for k, values in enumerate(steps_values):
            w.write_step(
                k, losses[k], {n: np.asarray(v, dtype=np_dtype) for n, v in values.items()}
            )
    return path


def load_config(path=REPO / "config.yaml") -> dict:
    """The repository's default config as a dict."""
    with open(path, encoding="utf-8") as f:
        return yaml.safe_load(f)


#: The configs of the end-to-end tests, one YAML file each; each file's header says what it
#: is for and the command that runs it from the repository root.
TEST_CONFIGS = REPO / ".test"


def load_test_config(name: str) -> dict:
    """The config ``.test/{name}.yaml`` gives: merged over config.yaml the way
    ``snakemake --configfile .test/{name}.yaml`` merges it from the repository root
    (Snakemake's own ``update_config``), so a test runs what that command runs. A test that
    needs a variation changes the returned dict."""
    from snakemake.utils import update_config

    config = load_config()
    update_config(config, load_config(TEST_CONFIGS / f"{name}.yaml"))
    # A fresh copy without YAML's shared nodes (config.yaml's anchors), so a test's
    # change to one experiment's model or optimizer stays in that experiment.
    return json.loads(json.dumps(config))


def enabled_experiments(config: dict) -> dict:
    """The experiments a config runs (``enabled`` not false), by name."""
    return {k: e for k, e in config["experiments"].items() if e.get("enabled", True)}


def run_workflow(
    workdir: Path,
    config: dict | None,
    *args: str,
    check=True,
    timeout=1800,
    env=None,
    snakefile=None,
    umask=None,
):
    """Run the real workflow in ``workdir`` (config written there as test-config.yaml).

    ``env`` replaces the environment (default: this process's); ``snakefile`` runs another
    checkout's workflow; ``umask`` sets the umask Snakemake and its jobs run under. Returns
    the CompletedProcess (stdout+stderr merged in ``stdout``).
    """
    workdir.mkdir(parents=True, exist_ok=True)
    snakefile = snakefile or REPO / "Snakefile"
    cmd = [SNAKEMAKE, "--snakefile", str(snakefile), "--directory", str(workdir)]
    if config is not None:
        if check and Path(snakefile) == REPO / "Snakefile":
            # (A test that expects a refusal may lean on the merge.)
            check_runs_as_written(config)
        cfg = workdir / "test-config.yaml"
        cfg.write_text(yaml.safe_dump(config))
        cmd += ["--configfile", str(cfg)]
    cmd += list(args)
    env = dict(os.environ if env is None else env)
    env.setdefault("CARGO_TARGET_DIR", str(REPO / "rust" / "target"))
    proc = subprocess.run(
        cmd,
        cwd=workdir,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
        preexec_fn=None if umask is None else (lambda: os.umask(umask)),
    )
    if check and proc.returncode != 0:
        pytest.fail(f"snakemake failed ({proc.returncode}):\n{proc.stdout[-6000:]}")
    return proc


def check_runs_as_written(config: dict) -> None:
    """Fail a test whose whole config is not the one Snakemake runs once merged over
    config.yaml (``configcheck.merge_changes``): a test that replaced ``experiments`` with
    two of them ran all of them."""
    differ = merge_changes(config, load_config(), str(REPO / "schemas" / "config.schema.json"))
    if differ:
        pytest.fail(
            "the test's config is not the one Snakemake runs: merged over config.yaml it "
            f"differs at {', '.join(differ)} (leave experiments out with `only` or "
            "`enabled: false`; update a section rather than replace it)"
        )


def build_runner(crate, dest: Path) -> str:
    """A Rust runner's CPU binary (``candle-parity``, ``burn-parity``) of the pinned
    release, built (or found up to date) in the target folder the workflow builds it in
    (``burn`` for burn, ``default`` for candle's CPU build: parity.train.build, so
    their dependencies are compiled once) and copied into ``dest``; returns the copy's
    path. The build and the copy hold the target folder's lock, as the workflow's build job
    does: a workflow run building another release into the same folder cannot swap the
    binary between them. Its build record holds the source id this checkout and
    config.yaml build for that release on the CPU (what a comparison holds the traces it
    makes to), although the binary itself, built without ``PARITY_SOURCE_ID``, answers
    ``unknown``."""
    root = Path(os.environ.get("CARGO_TARGET_DIR") or REPO / "rust" / "target")
    target = root / ("burn" if crate == "burn-parity" else "default")
    with exclusive_lock(f"{target}.lock", 7200):
        subprocess.run(
            [
                "cargo",
                "build",
                "--release",
                "--locked",
                "--quiet",
                "--manifest-path",
                str(REPO / "rust" / "Cargo.toml"),
                "-p",
                crate,
                "--target-dir",
                str(target),
            ],
            check=True,
        )
        dest.mkdir(parents=True, exist_ok=True)
        shutil.copy2(target / "release" / crate, dest / crate)
    framework = crate.removesuffix("-parity")
    record_binary(dest / crate, _source_id(framework, versions.pinned(framework), "cpu"))
    return str(dest / crate)


def workflow_source_id(binary, config=None) -> str | None:
    """The source id this checkout and ``config`` (default: config.yaml) build for a runner
    binary named as the workflow names it (``candle-parity-0.11.0-cpu``,
    ``versions.runner_binary``; ``parity.plan.builds``), which the jobs that start it hold
    its build record to; None for another name."""
    from parity.plan import builds

    m = re.fullmatch(
        rf"(candle|burn)-parity-({versions.VERSION_PATTERN})-([a-z]+)", Path(binary).name
    )
    if m is None:
        return None
    framework, version, device = m.group(1), m.group(2), m.groups()[-1]
    return builds.runner_build(config or load_config(), framework, version, device)["source_id"]


def record_binary(binary, source_id=None) -> None:
    """The build record a job checks before it starts ``binary`` (the one a build job writes,
    ``integrity.write_binary_record``), for a binary a test built or made itself; the
    source id is, unless given, the one this checkout builds for a binary put where the
    workflow's build would write it (:func:`workflow_source_id`: the jobs hold the record to
    it), else the binary's own answer."""
    if source_id is None:
        source_id = workflow_source_id(binary)
    if source_id is None:
        source_id = subprocess.run(
            [str(binary), "source-id"], check=True, capture_output=True, text=True
        ).stdout.strip()
    integrity.write_binary_record(binary, source_id)


@pytest.fixture(scope="session")
def candle_binary(tmp_path_factory):
    """The candle-parity CPU binary (candle's pinned release)."""
    return build_runner("candle-parity", tmp_path_factory.mktemp("bin"))


@pytest.fixture(scope="session")
def burn_binary(tmp_path_factory):
    """The burn-parity binary of the primary release (burn's ndarray backend: CPU only)."""
    return build_runner("burn-parity", tmp_path_factory.mktemp("bin"))


def pytest_collection_modifyitems(config, items):
    """Run the slow test files first: files with a Slurm test, then files with a workflow
    test, then the rest, each in collection order (a stable sort, so a file's tests stay
    together and its module fixtures are set up once). With ``pytest -n 2 --dist loadfile
    --no-loadscope-reorder`` (scripts/dev/test) the two workers start on the longest files
    and the many short unit-test files fill the end, which keeps both cores busy."""

    def rank(item) -> int:
        marks = {m.name for m in item.iter_markers()}
        return 0 if "slurm" in marks else 1 if "workflow" in marks else 2

    by_file: dict[str, int] = {}
    for item in items:
        f = item.nodeid.split("::", 1)[0]
        by_file[f] = min(by_file.get(f, 2), rank(item))
    items.sort(key=lambda item: by_file[item.nodeid.split("::", 1)[0]])
