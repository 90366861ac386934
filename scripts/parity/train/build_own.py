"""The build of an own model's runner (rule ``build_own``): the runner crate that links the
user's Rust port (:mod:`parity.own.crate`), built by cargo into the target folder of the
workflow's own runner of that framework, and the binary it makes checked and copied out.

Before cargo runs, the user's crate is checked for what would otherwise fail far from its
cause: a crate whose ``parity-common`` dependency is another checkout's (the trait would be
another trait), or none. A crate that does not compile fails the job with cargo's first
errors in the message and the whole output in the job's log
(``results/logs/build/own-{experiment}-{framework}-{device}.log``).
"""

from __future__ import annotations

import logging
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from parity.core import integrity
from parity.own import crate as own_crate
from parity.plan import own as plan_own
from parity.plan import versions
from parity.train.build import copy_binary, locked_output, run_logged, target_folders


class OwnBuildError(RuntimeError):
    """An own model's runner that cannot be built; the message says why and where the
    full output is."""


def check_port(crate: str | Path, rust_dir: str | Path, framework: str) -> None:
    """Refuse a user's crate that does not depend on this checkout's ``parity-common``
    with the framework's feature (``features = ["candle"]``), naming what to write. Raises
    :class:`OwnBuildError`."""
    manifest = Path(crate) / "Cargo.toml"
    try:
        with open(manifest, "rb") as f:
            doc = tomllib.load(f)
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise OwnBuildError(f"{manifest}: not a readable Cargo.toml ({e})") from None
    why = plan_own.port_manifest_problem(doc, crate, framework, rust_dir)
    if why is not None:
        raise OwnBuildError(f"{manifest}: {why}")


def build_own(
    build: Mapping[str, Any],
    rust_dir: str | Path,
    out: str,
    log: logging.Logger,
    log_path: str,
) -> None:
    """Write the runner crate of ``build`` (the rule's params: ``experiment``,
    ``framework``, ``crate``, ``model``, ``features``, ``target``, ``source_id``), build
    it, and copy the binary to ``out`` after checking that it reports the build's source
    id. Raises :class:`OwnBuildError`."""
    framework, crate = build["framework"], build["crate"]
    check_port(crate, rust_dir, framework)
    _, target_dir = target_folders(rust_dir, build["target"])
    folder = Path(build["runner_crate"]).resolve()
    workspace = Path(rust_dir, "Cargo.toml").read_text(encoding="utf-8")
    lock = Path(rust_dir) / versions.lock_file(framework, versions.pinned(framework))
    packages = own_crate.runner_packages(lock, framework)
    package = own_crate.PACKAGE.format(experiment=build["experiment"], framework=framework)
    binary = os.path.join(target_dir, "release", package)
    command = [
        "cargo",
        "build",
        "--release",
        "--manifest-path",
        str(folder / "Cargo.toml"),
        "--target-dir",
        target_dir,
    ]
    # The workflow's runner of this framework builds in the same folder: one at a time. The
    # runner crate (its folder is this experiment's, framework's and device's) is written
    # under the same lock, so no other build reads it half-written.
    with locked_output(out, target_dir) as tmp:
        own_crate.write(
            folder,
            {
                "Cargo.toml": own_crate.manifest(
                    build["experiment"],
                    framework,
                    rust_dir,
                    crate,
                    build["features"],
                    own_crate.release_profile(workspace, packages),
                ),
                "src/main.rs": own_crate.main_rs(framework, build["model"], build["source_id"]),
            },
            lock,
        )
        status = run_logged(command, log, log_path)
        if status != 0:
            errors = versions.cargo_errors(log_path)
            raise OwnBuildError(
                f"the {framework} port in {crate} does not build (cargo exit status "
                f"{status}): "
                + ("; ".join(errors) or "see the log")
                + f"; the whole output is in {log_path}"
            )
        got = copy_binary(binary, tmp)
        if got != build["source_id"]:
            raise OwnBuildError(
                f"{binary} reports source id {got!r}, not this build's {build['source_id']}"
            )
    integrity.write_binary_record(out, build["source_id"])
    log.info("copied %s (source id %s) to %s", binary, build["source_id"], out)
