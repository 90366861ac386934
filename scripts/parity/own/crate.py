"""The cargo crate that links a user's Rust port to a runner (docs/own-model.md).

A user's crate implements parity-common's trait for candle (``parity_common::candle::
CandleModel``) or burn (``parity_common::burn::BurnModel``); it has no ``main``. The
build job of an own model (rule ``build_own``) writes a runner crate of a few lines
beside the experiment's results, ``results/own/{experiment}/{framework}-runner/``:

* ``Cargo.toml``: a package of its own (an empty ``[workspace]`` keeps it out of any
  workspace above it) depending on this checkout's runner library (``candle-parity`` with
  the device's features, or ``burn-parity`` with the primary burn entry's CPU backend
  only, by path) and on the user's crate (by path,
  renamed ``port``), with the release profile of ``rust/Cargo.toml``, so the dependencies
  the runner shares with the workflow's own runner are the same build artifacts;
* ``src/main.rs``: ``fn main`` calling the runner library's ``main`` with the user's
  model type and the build's source id;
* ``Cargo.lock``: started from ``rust/Cargo.lock`` the first time (cargo then adds what the
  user's crate needs and keeps every version the workflow's runner was built with), so the
  runner links the pinned candle or burn release and reuses its compiled dependencies.

The build goes to the target folder the workflow's own runner of that framework uses
(``default`` for candle on the CPU, ``burn``), so adding a model compiles only the user's
crate, the runner library and this crate.
"""

from __future__ import annotations

import re
import shutil
import tomllib
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path

#: The runner library each Rust framework's own runner links.
RUNNER_CRATES = {"candle": "candle-parity", "burn": "burn-parity"}
#: The package name of a generated runner (``{experiment}``, ``{framework}``).
PACKAGE = "own-runner-{experiment}-{framework}"


def package_name(crate: str | Path) -> str:
    """The ``[package] name`` of a user's crate (its Cargo.toml); ValueError without one."""
    import tomllib

    manifest = Path(crate) / "Cargo.toml"
    with open(manifest, "rb") as f:
        doc = tomllib.load(f)
    name = doc.get("package", {}).get("name")
    if not name:
        raise ValueError(f"{manifest} has no [package] name: not a library crate")
    return name


def manifest(
    experiment: str,
    framework: str,
    rust_dir: str | Path,
    crate: str | Path,
    features: Sequence[str],
    profile: str,
) -> str:
    """The runner crate's Cargo.toml (module docs). ``profile``: the ``[profile.…]`` tables
    of ``rust/Cargo.toml``, verbatim."""
    runner = RUNNER_CRATES[framework]
    lib = Path(rust_dir, runner).resolve()
    feats = "".join(f', features = ["{f}"]' for f in [",".join(features)] if f)
    if framework == "burn":
        # burn-parity's backend is one of its features (``features``: the primary burn
        # entry's), never its default beside it.
        feats = ", default-features = false" + feats
    return (
        "# Written by the parity workflow (rule build_own); edits are overwritten.\n"
        "[package]\n"
        f'name = "{PACKAGE.format(experiment=experiment, framework=framework)}"\n'
        'version = "0.0.0"\n'
        'edition = "2021"\n'
        "publish = false\n\n"
        "[workspace]\n\n"
        "[dependencies]\n"
        f'{runner} = {{ path = "{_toml_path(lib)}"{feats} }}\n'
        f'port = {{ package = "{package_name(crate)}", '
        f'path = "{_toml_path(Path(crate).resolve())}" }}\n\n'
        f"{profile.strip()}\n"
    )


def _toml_path(p: Path) -> str:
    """A path as a TOML basic string's content (backslashes and quotes escaped)."""
    return str(p).replace("\\", "\\\\").replace('"', '\\"')


def main_rs(framework: str, model_type: str, source: str) -> str:
    """The runner's ``src/main.rs``: the runner library's ``main`` for the user's
    ``model_type`` (a path inside the crate, ``TinyLlama`` or ``models::TinyLlama``)."""
    if not re.fullmatch(r"[A-Za-z_]\w*(::[A-Za-z_]\w*)*", model_type):
        raise ValueError(f"{model_type!r} is not a Rust type path")
    lib = RUNNER_CRATES[framework].replace("-", "_")
    return (
        "// Written by the parity workflow (rule build_own); edits are overwritten.\n"
        f"fn main() -> std::process::ExitCode {{\n"
        f'    {lib}::main::<port::{model_type}>("{source}")\n'
        "}\n"
    )


def release_profile(workspace_manifest: str, packages: Collection[str] | None = None) -> str:
    """The ``[profile.*]`` tables of the workspace's Cargo.toml, verbatim, so a runner
    crate compiles its dependencies as the workflow's own runner does. With ``packages``
    (:func:`runner_packages`), a ``[profile.*.package.NAME]`` table whose NAME is not among
    them is left out: cargo warns of every such table that matches no package of the build
    (the workspace names burn's crates and candle's, a port's build has one framework's)."""
    out, keep = [], False
    for line in workspace_manifest.splitlines():
        if line.startswith("["):
            table = re.fullmatch(r'\[profile\.[^.\]]+\.package\."?([^"\]]+)"?\]\s*', line)
            keep = line.startswith("[profile") and (
                packages is None or table is None or table.group(1) in packages
            )
        if keep:
            out.append(line)
    return "\n".join(out)


#: The crates through which parity-common's optional features (``candle``, ``burn``) bring in
#: each framework: a Cargo.lock lists them all as parity-common's dependencies.
FRAMEWORK_ROOTS = {"candle": {"candle-core", "candle-nn"}, "burn": {"burn"}}


def runner_packages(lock: str | Path, framework: str) -> set[str]:
    """The names of the packages a framework's runner crate (``candle-parity``,
    ``burn-parity``) depends on, itself included, directly or not, read from a Cargo.lock
    (its ``[[package]]`` entries and their ``dependencies``, "name" or "name version …").
    A lock file holds the dependencies of every feature, so this is a superset of what cargo
    builds; the other framework's crates (FRAMEWORK_ROOTS), which parity-common brings only
    with that framework's feature, are not followed."""
    with open(lock, "rb") as f:
        entries = tomllib.load(f).get("package", [])
    versions_of: dict[str, list[str]] = {}
    for entry in entries:
        versions_of.setdefault(entry["name"], []).append(entry["version"])

    def key(dependency: str) -> tuple[str, str]:
        # "name" when one version is locked, else "name version" (then maybe "(source)").
        name, *rest = dependency.split()
        return name, rest[0] if rest else versions_of[name][0]

    deps = {(e["name"], e["version"]): [key(d) for d in e.get("dependencies", [])] for e in entries}
    other = set().union(*(r for f, r in FRAMEWORK_ROOTS.items() if f != framework))
    root = RUNNER_CRATES[framework]
    seen: set[tuple[str, str]] = set()
    todo = [(root, versions_of[root][0])]
    while todo:
        package = todo.pop()
        if package not in seen and package[0] not in other:
            seen.add(package)
            todo.extend(deps.get(package, ()))
    return {name for name, _ in seen}


def write(
    folder: str | Path,
    files: Mapping[str, str],
    seed_lock: str | Path,
) -> Path:
    """Write the runner crate's files (name → text) into ``folder`` where they differ (an
    unchanged file keeps its time, so cargo rebuilds nothing for it), and a Cargo.lock
    started from ``seed_lock`` when there is none. Returns the manifest's path."""
    root = Path(folder)
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            tmp = path.with_name(path.name + ".tmp")
            tmp.write_text(text, encoding="utf-8")
            tmp.replace(path)
    lock = root / "Cargo.lock"
    if not lock.is_file():
        shutil.copyfile(seed_lock, lock)
    return root / "Cargo.toml"
