"""The build job of the Rust runners (parity.train.build) against a fake cargo: the binary
copied out only once it reports the build's source id, another build's binary cleaned and
built again, a build that fails twice failing the job with nothing written, and the shared
steps an own model's build uses too."""

import logging
import os
import re
import shutil
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from parity.train import build as runner_build

LOG = logging.getLogger("test_build")

#: A fake cargo: ``build`` writes ``<target-dir>/release/<crate>``, a script answering
#: ``source-id`` with $PARITY_SOURCE_ID ("stale" until the first ``clean`` in mode
#: ``stale-once``; mode ``fail`` exits 101); every call is appended to $FAKE_CARGO_CALLS.
FAKE_CARGO = textwrap.dedent(
    f"""\
    #!{sys.executable}
    import os, sys
    args = sys.argv[1:]
    with open(os.environ["FAKE_CARGO_CALLS"], "a") as f:
        f.write(" ".join(args) + "\\n")
    print("cargo", *args)
    mode = os.environ.get("FAKE_CARGO_MODE", "ok")
    target = args[args.index("--target-dir") + 1]
    crate = args[args.index("-p") + 1]
    cleaned = os.path.join(target, "cleaned")
    if args[0] == "clean":
        os.makedirs(target, exist_ok=True)
        open(cleaned, "w").close()
        sys.exit(0)
    if mode == "fail":
        print("error[E0425]: cannot find value `x` in this scope", file=sys.stderr)
        sys.exit(101)
    answer = os.environ["PARITY_SOURCE_ID"]
    if mode == "stale-once" and not os.path.exists(cleaned):
        answer = "stale"
    os.makedirs(os.path.join(target, "release"), exist_ok=True)
    binary = os.path.join(target, "release", crate)
    with open(binary, "w") as f:
        f.write("#!/bin/sh\\necho " + answer + "\\n")
    os.chmod(binary, 0o755)
    """
)


@pytest.fixture
def fake_cargo(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    cargo = bin_dir / "cargo"
    cargo.write_text(FAKE_CARGO)
    cargo.chmod(0o755)
    calls = tmp_path / "calls.txt"
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_CARGO_CALLS", str(calls))
    monkeypatch.setenv("CARGO_TARGET_DIR", str(tmp_path / "cargo-target"))
    (tmp_path / "rust").mkdir()
    (tmp_path / "rust" / "Cargo.toml").write_text("[workspace]\n")
    return calls


def _settings(source_id="abc123"):
    return {
        "framework": "candle",
        "version": "0.11.0",
        "staged": False,
        "stage_files": [],
        "target": "default",
        "features": [],
        "source_id": source_id,
    }


def _build(tmp_path, **kw):
    out = tmp_path / "results" / "bin" / "candle-parity-0.11.0-cpu"
    log_path = tmp_path / "build.log"
    runner_build.build(
        _settings(**kw), "candle-parity", str(tmp_path / "rust" / "Cargo.toml"), str(out), LOG,
        str(log_path),
    )  # fmt: skip
    return out, log_path


def _calls(path):
    return [line.split()[0] for line in path.read_text().splitlines()]


def test_the_binary_is_copied_out_when_it_reports_the_builds_source_id(tmp_path, fake_cargo):
    out, log_path = _build(tmp_path)
    assert runner_build.source_id(out) == "abc123"
    assert out.stat().st_mode & stat.S_IXUSR  # the copy keeps its execute bits
    assert _calls(fake_cargo) == ["build"]
    call = fake_cargo.read_text().split()
    assert call[call.index("--target-dir") + 1] == str(tmp_path / "cargo-target" / "default")
    assert "--locked" in call and call[call.index("-p") + 1] == "candle-parity"
    assert "cargo build --release --locked" in log_path.read_text()  # cargo's output


def test_another_builds_binary_is_cleaned_and_built_again(tmp_path, fake_cargo, monkeypatch):
    monkeypatch.setenv("FAKE_CARGO_MODE", "stale-once")
    out, _ = _build(tmp_path)
    assert runner_build.source_id(out) == "abc123"
    assert _calls(fake_cargo) == ["build", "clean", "build"]
    assert "-p parity-common" in fake_cargo.read_text().splitlines()[1]


def test_a_build_that_fails_twice_fails_the_job_and_writes_nothing(
    tmp_path, fake_cargo, monkeypatch
):
    monkeypatch.setenv("FAKE_CARGO_MODE", "fail")
    with pytest.raises(subprocess.CalledProcessError):
        _build(tmp_path)
    assert _calls(fake_cargo) == ["build", "clean", "build"]
    assert not (tmp_path / "results" / "bin" / "candle-parity-0.11.0-cpu").exists()
    assert "error[E0425]" in (tmp_path / "build.log").read_text()
    assert not list((tmp_path / "results" / "bin").glob(".tmp-*"))


def test_the_target_folder_follows_cargo_target_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("CARGO_TARGET_DIR", str(tmp_path / "cache"))
    assert runner_build.target_folders("rust", "burn") == (
        str(tmp_path / "cache"),
        str(tmp_path / "cache" / "burn"),
    )
    monkeypatch.delenv("CARGO_TARGET_DIR")
    assert runner_build.target_folders("rust", "burn") == ("rust/target", "rust/target/burn")


def test_the_shared_steps_lock_the_target_folder_and_check_the_copy(tmp_path):
    binary = tmp_path / "runner"
    binary.write_text("#!/bin/sh\nexit 3\n")
    binary.chmod(0o755)
    out = tmp_path / "out" / "runner"
    with runner_build.locked_output(out, str(tmp_path / "target")) as tmp:
        assert (tmp_path / "target.lock").exists()
        assert runner_build.copy_binary(binary, tmp) == ""  # a binary that does not answer
    assert out.read_text() == binary.read_text()
    log_path = tmp_path / "cmd.log"
    assert runner_build.run_logged(["sh", "-c", "echo hi; exit 4"], LOG, log_path) == 4
    assert log_path.read_text() == "hi\n"


#: A binary crate beside parity-common that prints what parity-common's ``lock_version``
#: answers for a lock file that does not exist ("unknown" in the real code).
TINY_BIN = textwrap.dedent(
    """\
    fn main() {
        let v = parity_common::build_info::lock_version(std::path::Path::new("/nonexistent"), "x");
        println!("{v}");
    }
    """
)


def tiny_checkout(root, rust_dir, marker):
    """A workspace of parity-common (copied from this checkout, its ``"unknown"`` answer
    replaced by ``marker``) and a binary crate printing that answer."""
    (root / "tiny" / "src").mkdir(parents=True)
    shutil.copytree(rust_dir / "parity-common", root / "parity-common")
    info = root / "parity-common" / "src" / "build_info.rs"
    info.write_text(info.read_text().replace('"unknown".into()\n}', f'"{marker}".into()\n}}', 1))
    (root / "tiny" / "src" / "main.rs").write_text(TINY_BIN)
    (root / "tiny" / "Cargo.toml").write_text(
        '[package]\nname = "tiny"\nversion = "0.1.0"\nedition = "2021"\n\n'
        '[dependencies]\nparity-common = { path = "../parity-common" }\n'
    )
    workspace = (rust_dir / "Cargo.toml").read_text()
    members = 'members = ["parity-common", "tiny"]'
    (root / "Cargo.toml").write_text(re.sub(r"members = \[[^\]]*\]", members, workspace))
    shutil.copy(rust_dir / "Cargo.lock", root / "Cargo.lock")
    return root / "Cargo.toml"


def test_a_second_checkout_never_links_the_first_ones_parity_common(tmp_path):
    """Real cargo: checkout B, whose files are older than checkout A's build in the shared
    target folder, is built with its own source id and prints B's answer, not A's."""
    rust_dir = Path(runner_build.__file__).resolve().parents[3] / "rust"
    target = tmp_path / "target"
    a = tiny_checkout(tmp_path / "a", rust_dir, "answer-a")
    b = tiny_checkout(tmp_path / "b", rust_dir, "answer-b")
    past = time.time() - 3600
    for f in (tmp_path / "b").rglob("*"):
        os.utime(f, (past, past))

    def build_and_run(manifest, source_id):
        env = dict(os.environ, PARITY_SOURCE_ID=source_id)
        cmd = ["cargo", "build", "--release", "--quiet", "-p", "tiny"]
        subprocess.run(
            [*cmd, "--manifest-path", str(manifest), "--target-dir", str(target)],
            env=env,
            check=True,
        )
        exe = target / "release" / "tiny"
        return subprocess.run([exe], capture_output=True, text=True, check=True).stdout.strip()

    assert build_and_run(a, "a") == "answer-a"
    assert build_and_run(b, "b") == "answer-b"
