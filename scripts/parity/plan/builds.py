"""What each Rust runner binary is built from, and the identity the build of this checkout
and config gives it: its file name and its *source id*, the hash of what it is built from.

A build job (``parity.train.build``, ``parity.train.build_own``) embeds the source id in the
binary, checks that the binary answers with it, and records both beside the binary
(``integrity.write_binary_record``). Every job that starts a binary holds that record to
what :func:`runner_build` or :func:`own_source_id` compute now (``integrity.check_binary``
with :func:`run_identity`), so another build's binary copied in with its record (another
release, another backend, another own port, an older checkout's) is refused before it
runs; and a comparison holds the source id a trace recorded (``runner.source_id``) to the
same value (``plan.Plan.trace_expectation``).

Every path hashed is relative (to the Rust workspace, or to the user's crate), so a copy of
the project elsewhere (another clone, another host at the same commit) computes the same
ids. Pure Python: it runs while the DAG is built.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from parity.core import paths
from parity.plan import frameworks, versions

#: This checkout's Rust workspace.
RUST_DIR = versions.RUST_DIR
#: What the Rust builds read, as glob patterns relative to the workspace.
RUST_PATTERNS = ("Cargo.*", "*/Cargo.toml", "*/build.rs", "*/src/**/*.rs")


def all_rust_files(rust_dir: str | Path = RUST_DIR) -> list[str]:
    """Every file the Rust builds read (:data:`RUST_PATTERNS`), relative to ``rust_dir``,
    sorted."""
    root = Path(rust_dir)
    return sorted(str(p.relative_to(root)) for pattern in RUST_PATTERNS for p in root.glob(pattern))


def rust_files(crate: str, rust_dir: str | Path = RUST_DIR) -> list[str]:
    """What one runner's build reads (relative to ``rust_dir``): the workspace manifest and
    lock, parity-common and the crate itself (``candle-parity``, ``burn-parity``), so editing
    one runner does not rebuild (and rerun) the other."""
    return [
        p
        for p in all_rust_files(rust_dir)
        if len(Path(p).parts) == 1 or Path(p).parts[0] in ("parity-common", crate)
    ]


def build_files(framework: str, version: str, rust_dir: str | Path = RUST_DIR) -> list[str]:
    """What the build of one release of a framework's runner reads (relative to
    ``rust_dir``): :func:`rust_files`, with the release's own lock file in place of
    Cargo.lock for a release the workspace does not pin (``versions.lock_file``)."""
    lock = versions.lock_file(framework, version)
    files = [p for p in rust_files(f"{framework}-parity", rust_dir) if p != "Cargo.lock"]
    return sorted([*files, lock])


def candle_feature_names(config: Mapping[str, Any], device: str) -> list[str]:
    """candle's cargo features for ``device`` (config ``candle.features``)."""
    return list(((config.get("candle") or {}).get("features") or {}).get(device) or [])


def cargo_features(config: Mapping[str, Any], framework: str, version: str, device: str) -> list:
    """cargo's feature arguments of a runner build: candle's device features
    (``--features cuda``), burn's backend (``versions.cargo_features``)."""
    if framework == "candle":
        names = candle_feature_names(config, device)
        return ["--features", ",".join(names)] if names else []
    return versions.cargo_features(framework, version)


def runner_build(
    config: Mapping[str, Any],
    framework: str,
    version: str,
    device: str,
    rust_dir: str | Path = RUST_DIR,
) -> dict:
    """What the build job of ``framework``'s runner of release ``version`` for ``device``
    receives (rules ``build_candle``, ``build_burn``; ``parity.train.build.build``): the
    release, whether it is built from a staged copy of the workspace (a release the
    workspace does not pin) and which files that copy holds, the cargo target folder's name,
    the features and the source id the binary must report.

    The source id (16 hex digits) hashes the framework, the release, the features and each
    of :func:`build_files` by its relative path and bytes. The target folder is a name, not a
    path (``parity.train.build.target_folders``): one per feature set for candle, burn's
    own. A param holds no path, so a copy of the project is not rebuilt. Raises ``OSError``
    for a build file that cannot be read."""
    rust_dir = Path(rust_dir)
    features = cargo_features(config, framework, version, device)
    files = build_files(framework, version, rust_dir)
    names = candle_feature_names(config, device)
    target = ("-".join(sorted(names)) or "default") if framework == "candle" else "burn"
    staged = version != versions.pinned(framework)
    return {
        "framework": framework,
        "version": version,
        "staged": staged,
        "stage_files": all_rust_files(rust_dir) if staged else [],
        "target": target,
        "features": features,
        "source_id": _hashed([framework, version, *features], rust_dir, files),
    }


#: :func:`_hashed`'s answers, by what it hashed and each file's size and time: the DAG asks
#: for one build's source id from many jobs' params.
_HASHED: dict[tuple, str] = {}


def _hashed(words: list[str], root: Path, files: list[str]) -> str:
    """16 hex digits of the sha256 of ``words`` (joined by spaces), then each of ``files``
    (relative to ``root``) by its path and bytes. Raises ``OSError`` for a file that cannot
    be read."""
    stats = tuple((f, (st := (root / f).stat()).st_size, st.st_mtime_ns) for f in files)
    key = (tuple(words), str(root), stats)
    if key not in _HASHED:
        h = hashlib.sha256(" ".join(words).encode())
        for path in files:
            h.update(path.encode())
            h.update((root / path).read_bytes())
        _HASHED[key] = h.hexdigest()[:16]
    return _HASHED[key]


def runner_identity(
    config: Mapping[str, Any],
    framework: str,
    version: str,
    device: str,
    rust_dir: str | Path = RUST_DIR,
) -> dict[str, str]:
    """What a job that starts the runner of ``framework`` ``version`` for ``device`` holds
    its build record to (``integrity.check_binary``): ``binary``, the file name its build
    writes (``versions.runner_binary``), and ``source_id`` (:func:`runner_build`)."""
    return {
        "binary": Path(versions.runner_binary(framework, version, device)).name,
        "source_id": runner_build(config, framework, version, device, rust_dir)["source_id"],
    }


def own_features(config: Mapping[str, Any], framework: str, device: str) -> list[str]:
    """The runner library's features an own runner links (feature names, not cargo
    arguments): candle's device features; for burn the primary burn entry's CPU backend
    (ndarray, or flex for a primary ``0.22.1+flex``)."""
    if framework == "candle":
        return candle_feature_names(config, device)
    return [versions.backend(framework, versions.primary(config, framework))]


#: What a user's crate consists of, relative to its folder: what the build job reads.
CRATE_FILES = ("Cargo.toml", "build.rs", "src/**/*.rs")


def crate_files(crate: str | Path) -> list[Path]:
    """Every file of a user's crate a build reads (:data:`CRATE_FILES`; its Cargo.lock is
    not used: the runner's lock file decides the versions), sorted."""
    root = Path(crate)
    out: set[Path] = set()
    for pattern in CRATE_FILES:
        out.update(p for p in root.glob(pattern) if p.is_file())
    return sorted(out)


def source_id(
    framework: str,
    rust_files: Sequence[Path],
    crate: str | Path,
    features,
    rust_dir: str | Path | None = None,
) -> str:
    """The hash a runner binary reports (``source-id``): the framework, the features, the
    runner library's sources (``rust_files``) and every file of the user's crate, so the
    build job can tell its binary from another's in a shared target folder, and a job that
    starts it can tell it from another port's (``parity.plan.builds``). Each file is hashed
    by its path relative to the crate or, with ``rust_dir``, to the Rust workspace
    (``rust/…``), so another clone of the project computes the same id."""
    h = hashlib.sha256(" ".join([framework, *features]).encode())
    root = Path(crate)
    workspace = Path(rust_dir) if rust_dir is not None else None
    for p in [*rust_files, *crate_files(crate)]:
        if p.is_relative_to(root):
            rel = p.relative_to(root)
        elif workspace is not None and p.is_relative_to(workspace):
            rel = Path("rust", p.relative_to(workspace))
        else:
            rel = p
        h.update(str(rel).encode())
        h.update(p.read_bytes())
    return h.hexdigest()[:16]


def own_source_id(
    framework: str,
    crate: str | Path,
    features,
    rust_dir: str | Path = RUST_DIR,
) -> str:
    """The source id of an own runner (:func:`source_id`): the framework, the
    features, the runner library's sources (:func:`rust_files` of ``<framework>-parity``)
    and every file of the user's ``crate``."""
    rust_dir = Path(rust_dir)
    ours = [rust_dir / p for p in rust_files(f"{framework}-parity", rust_dir)]
    return source_id(framework, ours, crate, features, rust_dir=rust_dir)


def own_identity(
    config: Mapping[str, Any],
    model: Mapping[str, Any],
    experiment: str,
    framework: str,
    device: str,
    rust_dir: str | Path = RUST_DIR,
) -> dict[str, str]:
    """What a job that starts the own runner of ``experiment``'s ``framework`` port for
    ``device`` holds its build record to: ``binary``, the file name its build writes
    (``paths.OWN_BINARY``), and ``source_id`` (:func:`own_source_id` of the resolved
    ``model``'s crate)."""
    binary = paths.OWN_BINARY.format(experiment=experiment, framework=framework, device=device)
    features = own_features(config, framework, device)
    return {
        "binary": Path(binary).name,
        "source_id": own_source_id(framework, model[framework]["crate"], features, rust_dir),
    }


def run_identity(
    config: Mapping[str, Any],
    settings: Mapping[str, Any],
    experiment: str,
    device: str,
    rust_dir: str | Path = RUST_DIR,
) -> dict[str, str] | None:
    """The identity (:func:`runner_identity`, :func:`own_identity`) of the binary a run with
    resolved ``settings`` starts on ``device`` (``versions.run_binary``); None for a run of
    a framework without a binary (PyTorch)."""
    framework = settings["framework"]
    if framework not in frameworks.RUST_FRAMEWORKS:
        return None
    model = settings["model"]
    if model["family"] == "own" and "crate" in model.get(framework, {}):
        return own_identity(config, model, experiment, framework, device, rust_dir)
    return runner_identity(config, framework, settings["version"], device, rust_dir)
