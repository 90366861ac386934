"""Snakemake job: `cargo build --release --locked` of one Rust runner, then a check that
the binary copied out is this checkout's.

The cargo target folder is ``$CARGO_TARGET_DIR/<params.target>`` when that variable is set
(CI keeps it outside the clone), else ``rust/target/<params.target>`` next to the manifest.
It is worked out here, not passed as a param: a param naming a folder of this machine would
rebuild (and rerun everything after) in every copy of the project.

cargo names a workspace crate's artifacts without its checkout's path (so a cache serves
every clone), so two checkouts sharing a target folder (CI's cache, a second clone) can
overwrite each other's artifacts while each one's own fingerprint stays fresh: a stale
binary, or a stale parity-common that no longer compiles with this checkout. The build
embeds the hash of this checkout's runner sources (PARITY_SOURCE_ID); if the build fails
or the binary answers with another hash, this runner and parity-common are cleaned and
built once more.
"""

import os
import shutil
import subprocess

from parity.fileio import atomic_path, job_logger

sm = snakemake  # noqa: F821
log = job_logger(sm.log[0])
p = sm.params
rust_dir = os.path.dirname(os.path.abspath(sm.input.manifest))
target_dir = os.path.join(
    os.environ.get("CARGO_TARGET_DIR") or os.path.join(rust_dir, "target"), p.target
)
cargo = ["--manifest-path", sm.input.manifest, "-p", p.crate, "--target-dir", target_dir]
env = dict(os.environ, PARITY_SOURCE_ID=p.source_id)
binary = os.path.join(target_dir, "release", p.crate)


def run(*args):
    log.info("%s", " ".join(args))
    with open(sm.log[0], "ab") as out:
        subprocess.run(args, check=True, stdout=out, stderr=subprocess.STDOUT, env=env)


def source_id():
    return subprocess.run(
        [binary, "source-id"], check=True, capture_output=True, text=True
    ).stdout.strip()


def built_here():
    """Build; True when the binary is this checkout's."""
    try:
        run("cargo", "build", "--release", "--locked", *cargo, *p.features)
    except subprocess.CalledProcessError:
        return False
    return source_id() == p.source_id


if not built_here():
    log.warning("the build failed or %s is another checkout's; cleaning, building again", binary)
    run("cargo", "clean", "--release", *cargo, "-p", "parity-common")
    run("cargo", "build", "--release", "--locked", *cargo, *p.features)
    if source_id() != p.source_id:
        raise RuntimeError(f"{binary} still reports source id {source_id()}, not {p.source_id}")
with atomic_path(sm.output[0]) as tmp:
    shutil.copy2(binary, tmp)
log.info("copied %s (source id %s) to %s", binary, p.source_id, sm.output[0])
