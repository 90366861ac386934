"""The build of the Rust runners (rules ``build_candle``, ``build_burn``): ``cargo build
--release --locked`` of one release of a runner, then a check that the binary copied out is
this checkout's and this release's; and the steps every runner build shares (an own
model's too, ``parity.train.build_own``): the cargo target folder, cargo run into the job's
log, the binary copied out under the target folder's lock and its source id read back.

A release the workspace pins builds from ``rust/`` itself; any other from a staged copy of
the workspace (``parity.plan.versions.stage``: the runner's manifest requiring that
release, its committed lock file as Cargo.lock) under ``<target root>/workspaces/``.
Releases of one feature set share the cargo target folder, so the dependencies they have
in common are compiled once.

The cargo target folder is ``$CARGO_TARGET_DIR/<target>`` when that variable is set (CI
keeps it outside the clone), else ``rust/target/<target>`` next to the manifest
(:func:`target_folders`). It is worked out here, not passed as a param: a param naming a
folder of this machine would rebuild (and rerun everything after) in every copy of the
project.

cargo names a workspace crate's artifacts without its checkout's path (so a cache serves
every clone), so two checkouts sharing a target folder (CI's cache, a second clone) can
overwrite each other's artifacts while each one's own fingerprint stays fresh: a stale
binary, or a stale parity-common that no longer compiles with this checkout. The build
embeds the hash of this checkout's runner sources and release (``PARITY_SOURCE_ID``); if
the build fails or the binary answers with another hash, this runner and parity-common are
cleaned and built once more. A build that fails twice fails the job with cargo's message in
its log.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from parity.core import integrity
from parity.core.fileio import atomic_path, exclusive_lock
from parity.plan import versions

#: How long a build waits for the target folder's lock: two hours cover a cold build of
#: either release.
LOCK_WAIT = 7200


def target_folders(rust_dir: str | os.PathLike, target: str) -> tuple[str, str]:
    """(the cargo target root, the target folder of ``target``): ``$CARGO_TARGET_DIR``
    when set, else ``<rust_dir>/target``, and ``<root>/<target>`` below it."""
    root = os.environ.get("CARGO_TARGET_DIR") or os.path.join(rust_dir, "target")
    return root, os.path.join(root, target)


def run_logged(
    command: Sequence[str],
    log: logging.Logger,
    log_path: str | os.PathLike,
    env: Mapping[str, str] | None = None,
) -> int:
    """Run ``command`` (cargo and its arguments) with ``env`` (default: this process's),
    its command line logged and its output (stdout and stderr) appended to the job's log
    ``log_path``; returns its exit status."""
    log.info("%s", " ".join(command))
    with open(log_path, "ab") as sink:
        proc = subprocess.run(
            list(command),
            stdout=sink,
            stderr=subprocess.STDOUT,
            env=None if env is None else dict(env),
        )
    return proc.returncode


def source_id(binary: str | os.PathLike) -> str:
    """What a runner binary answers to ``source-id`` (the hash it was built with), or
    ``""`` when it does not answer."""
    proc = subprocess.run([str(binary), "source-id"], capture_output=True, text=True)
    return proc.stdout.strip() if proc.returncode == 0 else ""


@contextlib.contextmanager
def locked_output(out: str | os.PathLike, target_dir: str) -> Iterator[Path]:
    """The temporary path a build copies its binary to, published as ``out`` on success
    (``fileio.atomic_path``), with the target folder's lock held throughout: builds into
    one target folder (releases of one feature set, an own model's runner beside the
    workflow's, another checkout on this cache) share ``release/<crate>``, so the build
    and the copy out happen under one lock and no other build can replace the binary
    between them (cargo's own lock covers the build only). Raises
    ``fileio.LockHeld`` after :data:`LOCK_WAIT` seconds."""
    with atomic_path(out) as tmp, exclusive_lock(target_dir + ".lock", LOCK_WAIT):
        yield tmp


def copy_binary(binary: str | os.PathLike, dest: str | os.PathLike) -> str:
    """Copy the binary cargo built to ``dest`` (its mode kept) and return the source id
    the copy reports (:func:`source_id`): the copy is checked, not the original, which
    another build may replace."""
    shutil.copy2(binary, dest)
    return source_id(dest)


def build(
    settings: Mapping[str, Any],
    crate: str,
    manifest: str | os.PathLike,
    out: str,
    log: logging.Logger,
    log_path: str,
) -> None:
    """Build one release of the runner ``crate`` (``candle-parity``, ``burn-parity``) and
    copy its binary to ``out``, once it reports this build's source id.

    ``settings`` is the rule's ``build`` param (rules/functions/build.smk, ``build_params``:
    ``framework``, ``version``, ``staged``, ``stage_files``, ``target``, ``features``,
    ``source_id``); ``manifest`` the workspace's ``Cargo.toml``; cargo's output goes to
    ``log_path``. A build that fails or copies out another build's binary is cleaned and
    built once more. Raises ``subprocess.CalledProcessError`` when cargo fails the second
    time and ``RuntimeError`` when the binary still reports another source id; ``out`` is
    not written then.
    """
    rust_dir = os.path.dirname(os.path.abspath(manifest))
    target_root, target_dir = target_folders(rust_dir, settings["target"])
    cargo = ["-p", crate, "--target-dir", target_dir]
    env = dict(os.environ, PARITY_SOURCE_ID=settings["source_id"])
    binary = os.path.join(target_dir, "release", crate)

    def run(*args: str) -> None:
        status = run_logged(args, log, log_path, env)
        if status != 0:
            raise subprocess.CalledProcessError(status, args)

    def build_and_copy(dest: Path) -> bool:
        run("cargo", "build", "--release", "--locked", *cargo, *settings["features"])
        return copy_binary(binary, dest) == settings["source_id"]

    with locked_output(out, target_dir) as tmp:
        if settings["staged"]:
            # A release the workspace does not pin: a copy of the workspace requiring it,
            # with its own lock file (parity.plan.versions.stage), beside the target folders.
            framework, version = settings["framework"], settings["version"]
            stage = os.path.join(target_root, "workspaces", f"{framework}-{version}")
            manifest = versions.stage(rust_dir, settings["stage_files"], framework, version, stage)
            log.info("staged %s %s in %s", framework, version, stage)
        cargo += ["--manifest-path", str(manifest)]
        try:
            ok = build_and_copy(tmp)
        except subprocess.CalledProcessError:
            ok = False
        if not ok:
            log.warning(
                "the build failed or %s is another build's; cleaning, building again", binary
            )
            run("cargo", "clean", "--release", *cargo, "-p", "parity-common")
            if not build_and_copy(tmp):
                raise RuntimeError(
                    f"{binary} reports source id {source_id(tmp)}, not {settings['source_id']}"
                )
    integrity.write_binary_record(out, settings["source_id"])
    log.info(
        "copied %s (%s %s, source id %s) to %s",
        binary,
        settings["framework"],
        settings["version"],
        settings["source_id"],
        out,
    )
