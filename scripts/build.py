"""Snakemake job: `cargo build --release --locked` of one release of a Rust runner, then a
check that the binary copied out is this checkout's and this release's.

A release the workspace pins builds from ``rust/`` itself; any other from a staged copy of
the workspace (``parity.plan.versions.stage``: the runner's manifest requiring that release, its
committed lock file as Cargo.lock) under ``<target root>/workspaces/``. Releases of one
feature set share the cargo target folder, so the dependencies they have in common are
compiled once.

The cargo target folder is ``$CARGO_TARGET_DIR/<params.target>`` when that variable is set
(CI keeps it outside the clone), else ``rust/target/<params.target>`` next to the manifest.
It is worked out here, not passed as a param: a param naming a folder of this machine would
rebuild (and rerun everything after) in every copy of the project.

cargo names a workspace crate's artifacts without its checkout's path (so a cache serves
every clone), so two checkouts sharing a target folder (CI's cache, a second clone) can
overwrite each other's artifacts while each one's own fingerprint stays fresh: a stale
binary, or a stale parity-common that no longer compiles with this checkout. The build
embeds the hash of this checkout's runner sources and release (PARITY_SOURCE_ID); if the
build fails or the binary answers with another hash, this runner and parity-common are
cleaned and built once more. A build that fails twice fails the job with cargo's message
in its log.
"""

import os
import shutil
import subprocess

from parity.core import integrity
from parity.core.fileio import atomic_path, exclusive_lock, job_logger
from parity.plan import versions

sm = snakemake  # noqa: F821
log = job_logger(sm.log[0])
b = sm.params.build
crate = sm.params.crate
rust_dir = os.path.dirname(os.path.abspath(sm.input.manifest))
target_root = os.environ.get("CARGO_TARGET_DIR") or os.path.join(rust_dir, "target")
target_dir = os.path.join(target_root, b["target"])
cargo = ["-p", crate, "--target-dir", target_dir]
env = dict(os.environ, PARITY_SOURCE_ID=b["source_id"])
binary = os.path.join(target_dir, "release", crate)


def run(*args):
    log.info("%s", " ".join(args))
    with open(sm.log[0], "ab") as out:
        subprocess.run(args, check=True, stdout=out, stderr=subprocess.STDOUT, env=env)


def source_id(path):
    return subprocess.run(
        [path, "source-id"], check=True, capture_output=True, text=True
    ).stdout.strip()


def build_and_copy(out):
    """Build, copy the binary to ``out``; True when the copy is this build's (releases of
    one feature set share a target folder, so the copy is checked, not the original)."""
    run("cargo", "build", "--release", "--locked", *cargo, *b["features"])
    shutil.copy2(binary, out)
    return source_id(out) == b["source_id"]


# Releases of one feature set share ``target_dir`` and its ``release/<crate>``: the build
# and the copy out happen under one lock, so a second release's build (another job, or
# another checkout on this cache) cannot replace the binary between them. Cargo's own lock
# covers the build only. Two hours covers a cold build of either release.
with atomic_path(sm.output[0]) as tmp, exclusive_lock(target_dir + ".lock", 7200):
    manifest = sm.input.manifest
    if b["staged"]:
        # A release the workspace does not pin: a copy of the workspace requiring it, with
        # its own lock file (parity.plan.versions.stage), beside the target folders.
        stage = os.path.join(target_root, "workspaces", f"{b['framework']}-{b['version']}")
        manifest = str(
            versions.stage(rust_dir, b["stage_files"], b["framework"], b["version"], stage)
        )
        log.info("staged %s %s in %s", b["framework"], b["version"], stage)
    cargo += ["--manifest-path", manifest]
    try:
        ok = build_and_copy(tmp)
    except subprocess.CalledProcessError:
        ok = False
    if not ok:
        log.warning("the build failed or %s is another build's; cleaning, building again", binary)
        run("cargo", "clean", "--release", *cargo, "-p", "parity-common")
        if not build_and_copy(tmp):
            raise RuntimeError(f"{binary} reports source id {source_id(tmp)}, not {b['source_id']}")
integrity.write_binary_record(sm.output[0], b["source_id"])
log.info(
    "copied %s (%s %s, source id %s) to %s",
    binary,
    b["framework"],
    b["version"],
    b["source_id"],
    sm.output[0],
)
