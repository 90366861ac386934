"""The version axis of the Rust frameworks: which releases run, what each is built from,
and the names of the runs, comparisons and probe results each release adds.

Config ``candle.versions`` and ``burn.versions`` list releases (default: the release the
workspace pins, ``frameworks.<name>.PINNED_VERSION``). The first listed is the *primary*
release: its runs keep the run names (``candle``), comparisons and paths of a config
without versions. Each further release ``v`` adds, per experiment:

* a run ``<run>_v<v>`` (``candle_v0_11_1``) for every run of the framework, the same
  settings with ``version: v``;
* a twin ``<comparison>_v<v>`` of every comparison of a PyTorch run with a run of the
  framework, the framework's side replaced by its ``_v<v>`` run; ``expect`` and
  ``tolerance`` are the comparison's unless its ``versions: {v: {...}}`` overrides them;
* a comparison ``<run>_v<v>_vs_primary``: the primary release's run against the new one,
  at the config's ``tolerance``; expected to pass unless an override above makes a twin
  expect otherwise than its comparison (then the releases must differ).

Probe results of a further release are ``results/probes/{probe}/candle_v0_11_1-…``.

A framework with more than one CPU backend (burn: ``BACKENDS`` of its definition, the
first the default) spells a build of another backend as the release with the backend as
semantic-version build metadata: ``0.22.1+flex`` is burn 0.22.1 built with its ``flex``
feature (run ``burn_v0_22_1_flex``); ``0.22.1`` is the default backend. Such an entry is a
release of its own everywhere above (its runs, twins, binary, probe results, column of the
release matrix); it builds from the lock file of its release when that is the pinned one
(``rust/Cargo.lock`` locks every backend), else from ``rust/versions/<framework>-<entry>.lock``.

Building a release (``parity.train.build``): the primary or pinned release from the
workspace itself (``rust/Cargo.lock``); any other from a copy of the workspace whose
runner manifest requires ``=v`` of each of the framework's crates, with the committed lock
file ``rust/versions/<framework>-<v>.lock`` (``cargo build --locked``). A release without
that file is refused before any job runs; ``scripts/dev/lock-version`` makes it.

Pure Python: it runs while the DAG is built.
"""

from __future__ import annotations

import copy
import functools
import importlib.metadata
import re
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from parity.core import paths
from parity.core.config import ConfigError
from parity.plan import frameworks

#: A release as the config spells it: semantic version, optionally with a pre-release part
#: (``0.12.0-alpha.1``) and a backend as build metadata (``0.22.1+flex``); the build rule's
#: wildcard holds the same.
VERSION_PATTERN = r"[0-9]+\.[0-9]+\.[0-9]+(-[0-9a-z.]+)?(\+[a-z]+)?"
VERSION_RE = re.compile(rf"^{VERSION_PATTERN}\Z")
#: The folder of the further releases' lock files, relative to the Rust workspace.
LOCK_FOLDER = "versions"
#: This checkout's Rust workspace.
RUST_DIR = Path(__file__).resolve().parents[3] / "rust"
#: How the ``<run>_v<v>`` against primary comparison is named after the run.
VS_PRIMARY = "_vs_primary"


def pinned(framework: str) -> str:
    """The release the workspace's Cargo.toml and Cargo.lock pin for ``framework``."""
    return frameworks.definition(framework).PINNED_VERSION


def release(version: str) -> str:
    """The crates' release of a config entry: ``0.22.1+flex`` → ``0.22.1``."""
    return version.split("+", 1)[0]


def backends(framework: str) -> dict[str, str]:
    """A Rust framework's CPU backends, backend → the crate that is it, the default first
    (``BACKENDS`` of its definition); {} for a framework without that axis (candle)."""
    return dict(getattr(frameworks.definition(framework), "BACKENDS", {}))


def backend(framework: str, version: str) -> str | None:
    """The backend a config entry builds: its build metadata (``0.22.1+flex`` → ``flex``),
    else the framework's default backend; None for a framework without backends."""
    named = version.split("+", 1)[1] if "+" in version else None
    return named or next(iter(backends(framework)), None)


def cargo_features(framework: str, version: str) -> list[str]:
    """cargo's feature arguments that select a config entry's backend
    (``--no-default-features --features flex``); [] for a framework without backends."""
    chosen = backend(framework, version)
    return ["--no-default-features", "--features", chosen] if chosen else []


def display(framework: str, version: str) -> str:
    """A config entry as tables head it: the release, and for a framework with backends the
    backend it builds (``0.22.1`` → ``0.22.1 ndarray``, ``0.22.1+flex`` → ``0.22.1 flex``)."""
    chosen = backend(framework, version)
    return f"{release(version)} {chosen}" if chosen else version


def configured(config: Mapping[str, Any]) -> dict[str, list[str]]:
    """Each Rust framework's releases, the primary first (config ``<framework>.versions``,
    default ``[PINNED_VERSION]``)."""
    return {
        fw: list((config.get(fw) or {}).get("versions") or [pinned(fw)])
        for fw in frameworks.RUST_FRAMEWORKS
    }


def primary(config: Mapping[str, Any], framework: str) -> str:
    """The primary release of a Rust framework: the first one listed."""
    return configured(config)[framework][0]


def suffix(version: str) -> str:
    """The run and comparison name suffix of a further release: ``0.11.1`` → ``_v0_11_1``,
    ``0.12.0-alpha.1`` → ``_v0_12_0_alpha_1``."""
    return "_v" + re.sub(r"[^0-9a-z]+", "_", version.lower()).strip("_")


def label(framework: str, version: str, config: Mapping[str, Any]) -> str:
    """The name a release's probe results and binaries go by: the framework's name for the
    primary release, ``candle_v0_11_1`` for a further one."""
    return framework if version == primary(config, framework) else framework + suffix(version)


@functools.cache
def torch_version() -> str:
    """The installed PyTorch's release without the local part (``2.5.1`` for ``2.5.1+cu121``:
    a CPU and a CUDA build agree), read once from its metadata, without importing torch; ""
    without torch. A PyTorch run's settings hold it (``torch_version``): upgrading torch
    changes the run's hash and params, and Snakemake reruns it."""
    try:
        return public_version(importlib.metadata.version("torch"))
    except importlib.metadata.PackageNotFoundError:
        return ""


def public_version(version: str) -> str:
    """A version without its local part (``2.5.1+cpu`` → ``2.5.1``)."""
    return version.split("+", 1)[0]


def runner_binary(framework: str, version: str, device: str) -> str:
    """The binary of ``framework``'s runner built from release ``version`` for ``device``
    (``paths.RUNNER_BINARY``)."""
    return paths.fill(paths.RUNNER_BINARY, framework=framework, version=version, device=device)


def run_binary(settings: Mapping[str, Any], device: str) -> str:
    """The binary a Rust run with resolved ``settings`` (``framework``, ``version``) runs on
    ``device``: an own model's runner (``paths.OWN_BINARY``, linking the user's crate), else
    the framework's runner of that release (the built-in families, an own model's side
    ported by one of them: ``family``)."""
    model = settings["model"]
    if model["family"] == "own" and "crate" in model.get(settings["framework"], {}):
        return paths.OWN_BINARY.format(
            experiment=settings["model"]["name"], framework=settings["framework"], device=device
        )
    return runner_binary(settings["framework"], settings["version"], device)


def build_log(framework: str, version: str, device: str) -> str:
    """The log of the build of ``framework``'s runner from ``version`` for ``device``
    (``paths.BUILD_LOG``): cargo's own output, its error messages included."""
    return paths.fill(paths.BUILD_LOG, framework=framework, version=version, device=device)


#: Lines of cargo's output that :func:`cargo_errors` picks: rustc's and cargo's errors.
_CARGO_ERROR = re.compile(r"^error(\[E[0-9]+\])?: ")


def cargo_errors(log_path: str | Path, limit: int = 3) -> list[str]:
    """The first ``limit`` distinct error lines of a build log (``error: …``,
    ``error[E0599]: …``), cargo's summary line ("could not compile") last among them;
    [] when the log is missing or has none."""
    try:
        lines = Path(log_path).read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []
    found = [ln.strip() for ln in lines if _CARGO_ERROR.match(ln.strip())]
    found = list(dict.fromkeys(found))
    first = [ln for ln in found if "could not compile" not in ln]
    return (first + [ln for ln in found if "could not compile" in ln])[:limit]


def build_failure(framework: str, version: str, device: str) -> str | None:
    """Why a run or probe of ``framework`` ``version`` on ``device`` has no result when its
    runner did not build: "the candle 0.11.1 runner for cpu did not build (cargo: error…);
    see results/logs/build/candle-0.11.1-cpu.log". None while the binary is there, or
    when no build was tried (no log)."""
    binary, log = runner_binary(framework, version, device), build_log(framework, version, device)
    if Path(binary).exists() or not Path(log).exists():
        return None
    errors = cargo_errors(log)
    why = f" (cargo: {'; '.join(errors)})" if errors else ""
    return f"the {framework} {version} runner for {device} did not build{why}; see {log}"


def lock_file(framework: str, version: str) -> str:
    """The lock file a release builds from, relative to the Rust workspace: ``Cargo.lock``
    for the pinned release (with any backend: it locks them all), else
    ``versions/<framework>-<version>.lock``."""
    if release(version) == pinned(framework):
        return "Cargo.lock"
    return f"{LOCK_FOLDER}/{framework}-{version}.lock"


#: A ``[[package]]`` entry as cargo writes it: its ``name`` and ``version`` lines first.
_LOCKED_PACKAGE = re.compile(
    r'^\[\[package\]\]\r?\nname = "([^"\n]*)"\r?\nversion = "([^"\n]*)"', re.MULTILINE
)


def locked_versions(lock: Path) -> dict[str, set[str]]:
    """Package name → the versions a Cargo.lock holds. Raises ``ValueError`` naming the
    file when it is not a lock file.

    Cargo writes every ``[[package]]`` entry with its ``name`` and ``version`` lines first,
    and those are read with one regular expression (every no-op rerun reads the lock files,
    and a full TOML parse of three of them took a quarter of a second); a file with an entry
    that does not start that way (written by hand) is parsed as TOML instead."""
    try:
        text = lock.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"{lock}: not a readable Cargo.lock ({e})") from None
    out: dict[str, set[str]] = {}
    found = _LOCKED_PACKAGE.findall(text)
    if found and len(found) == text.count("[[package]]"):
        for name, version in found:
            out.setdefault(name, set()).add(version)
        return out
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"{lock}: not a readable Cargo.lock ({e})") from None
    for pkg in data.get("package", []):
        out.setdefault(pkg.get("name", ""), set()).add(pkg.get("version", ""))
    return out


def check(config: Mapping[str, Any], rust_dir: str | Path) -> list[ConfigError]:
    """Every problem of the config's ``<framework>.versions``: a malformed or repeated
    release, a backend the framework does not have (or the default one spelled out), one
    without its lock file (with the command that makes it), a lock file that does not lock
    each of the framework's crates, and the backend's crate, at that release."""
    problems = []
    rust_dir = Path(rust_dir)
    for fw, versions in configured(config).items():
        crates = frameworks.definition(fw).CRATES
        for i, v in enumerate(versions):
            where = f"{fw}.versions[{i}]"
            if not VERSION_RE.match(v):
                problems.append(ConfigError(where, f"{v!r} is not a release (e.g. 0.11.1)"))
                continue
            if v in versions[:i]:
                problems.append(ConfigError(where, f"{v} is listed twice"))
                continue
            known = backends(fw)
            why = backend_problem(fw, v)
            if why:
                problems.append(ConfigError(where, why))
                continue
            lock = rust_dir / lock_file(fw, v)
            if not lock.is_file():
                problems.append(
                    ConfigError(
                        where,
                        f"{fw} {v} has no lock file rust/{lock_file(fw, v)}: pin it with "
                        f"`scripts/dev/lock-version {fw} {v}` (cargo refuses a release the "
                        "registry lacks) and commit the file",
                    )
                )
                continue
            try:
                held = locked_versions(lock)
            except ValueError as e:
                problems.append(ConfigError(where, str(e)))
                continue
            chosen = backend(fw, v)
            extra = [known[chosen]] if chosen else []
            for crate in [*crates, *extra]:
                if release(v) not in held.get(crate, set()):
                    locked = ", ".join(sorted(held.get(crate, ()))) or "not at all"
                    why = f"rust/{lock_file(fw, v)} locks {crate} {locked}, not {release(v)}"
                    if crate in extra and not held.get(crate):
                        why += f": {fw} {release(v)} has no {chosen} backend here" + "".join(
                            f" (try {release(v)}+{b})" for b in known if b != chosen
                        )
                    problems.append(ConfigError(where, why))
    return problems


#: parity-common's manifest: its optional framework dependencies (the own-model traits,
#: features ``candle`` and ``burn``) pin the runner's release and follow a staged one.
COMMON_MANIFEST = "parity-common/Cargo.toml"


def runner_manifest(text: str, framework: str, version: str, name: str | None = None) -> str:
    """A runner's Cargo.toml (``rust/<framework>-parity/Cargo.toml``) requiring
    ``=release(version)`` of each of the framework's crates instead of the pinned release,
    and, for a framework with backends, keeping only the feature of ``version``'s backend
    (made the default): another release may lack the others (burn 0.23 has no ``ndarray``
    feature). Raises ``ValueError`` when a crate's ``="<pinned>"`` requirement is not found
    exactly once, or a backend's feature line is not (the manifest changed shape: this
    function must follow it).

    With ``name`` (another manifest's path, e.g. ``parity-common/Cargo.toml``, whose
    optional dependencies serve an own model's trait), every such requirement the manifest
    has is rewritten, none required; a framework crate pinned to a third release there is
    refused the same way."""
    old, full, version = pinned(framework), version, release(version)
    if name is None and backends(framework):
        text = _only_backend(text, framework, backend(framework, full))
    for crate in frameworks.definition(framework).CRATES:
        line = re.compile(
            rf'^({re.escape(crate)}\s*=\s*(?:\{{[^}}\n]*?version\s*=\s*)?")={re.escape(old)}"',
            re.MULTILINE,
        )
        text, n = line.subn(rf'\g<1>={version}"', text)
        if name is None and n != 1:
            raise ValueError(f'{framework}-parity/Cargo.toml: {n} requirements {crate} = "={old}"')
        other = re.compile(
            rf'^{re.escape(crate)}\s*=\s*(?:\{{[^}}\n]*?version\s*=\s*)?"=(?!{re.escape(version)}")',
            re.MULTILINE,
        )
        if name is not None and other.search(text):
            raise ValueError(f"{name}: {crate} is pinned to neither {old} nor {version}")
    return text


def _only_backend(text: str, framework: str, chosen: str) -> str:
    """The runner manifest with the feature lines of every backend but ``chosen`` removed
    and ``default = ["<chosen>"]``. Raises ``ValueError`` when a backend's feature line or
    the default line is not there exactly once."""
    for b in [*backends(framework), "default"]:
        line = re.compile(rf"^{re.escape(b)} = \[[^\]\n]*\]\n", re.MULTILINE)
        if len(line.findall(text)) != 1:
            raise ValueError(f"{framework}-parity/Cargo.toml: no one feature line {b} = [...]")
        if b == "default":
            text = line.sub(f'default = ["{chosen}"]\n', text)
        elif b != chosen:
            text = line.sub("", text)
    return text


def stage(
    rust_dir: str | Path, files: Iterable[str], framework: str, version: str, dest: str | Path
) -> Path:
    """A copy of the workspace that builds ``version`` of ``framework``: ``files`` (paths
    relative to ``rust_dir``) copied into ``dest``, the runner's manifest requiring the
    release (:func:`runner_manifest`), parity-common's optional framework dependencies (an
    own model's trait) requiring it too, and the release's lock file as ``Cargo.lock``.
    Files of ``dest`` whose content is already the same are left alone (cargo's
    fingerprints use their times); files of an earlier staging that ``files`` no longer
    names are removed (a module moved from ``x.rs`` to ``x/mod.rs`` would otherwise leave
    both, which rustc refuses), and so are folders left empty. Returns the copy's
    ``Cargo.toml``. Raises ``ValueError`` (see :func:`runner_manifest`) and ``OSError``."""
    rust_dir, dest = Path(rust_dir), Path(dest)
    runner = f"{framework}-parity/Cargo.toml"
    keep = {Path(rel) for rel in files} | {Path("Cargo.lock")}
    if dest.is_dir():
        for path in sorted(dest.rglob("*"), reverse=True):
            rel = path.relative_to(dest)
            if path.is_dir() and not path.is_symlink():
                if not any(path.iterdir()):
                    path.rmdir()
            elif rel not in keep:
                path.unlink()
    for rel in files:
        if rel == "Cargo.lock":
            continue
        data = (rust_dir / rel).read_bytes()
        if rel == runner:
            data = runner_manifest(data.decode(), framework, version).encode()
        elif rel == COMMON_MANIFEST:
            data = runner_manifest(data.decode(), framework, version, rel).encode()
        _write_if_changed(dest / rel, data)
    _write_if_changed(dest / "Cargo.lock", (rust_dir / lock_file(framework, version)).read_bytes())
    return dest / "Cargo.toml"


def _write_if_changed(path: Path, data: bytes) -> None:
    if path.is_file() and path.read_bytes() == data:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)


def backend_problem(framework: str, version: str) -> str | None:
    """What is wrong with the backend a config entry names, or None: a backend the framework
    does not have, or its default spelled out (``0.22.1+ndarray``: one spelling per build)."""
    if "+" not in version:
        return None
    named, known = version.split("+", 1)[1], backends(framework)
    if named not in known:
        if not known:
            return (
                f"{framework} has no backend {named!r} here "
                "(only burn's releases name a backend, e.g. 0.22.1+flex)"
            )
        return f"{framework} has no backend {named!r} here (its backends: {', '.join(known)})"
    if named == next(iter(known)):
        return (
            f"{named} is {framework}'s default backend: write {release(version)} "
            "(one spelling per build)"
        )
    return None


def buildable(framework: str, version: str) -> bool:
    """Whether this checkout could build ``version`` of ``framework`` were it listed: a
    well-formed entry without a :func:`backend_problem`, whose lock file is here."""
    if not VERSION_RE.match(version) or backend_problem(framework, version):
        return False
    return (RUST_DIR / lock_file(framework, version)).is_file()


def add_release_runs(where: str, exp: dict, config: Mapping[str, Any]) -> list[ConfigError]:
    """Add to a resolved experiment (``runs`` resolved, ``comparisons`` with ``expect`` and
    ``tolerance``) the runs and comparisons of each further release (module docstring), in
    place. Returns the problems: a generated name the config already uses, an override for
    a release the config does not list that is no release this checkout can build (a typo;
    an override for one it can build waits, unused, until the release is listed, so a
    config that narrows ``<framework>.versions`` keeps the default's overrides)."""
    problems: list[ConfigError] = []
    base_runs = dict(exp["runs"])
    base_comparisons = dict(exp["comparisons"])
    releases = configured(config)
    for cname, comp in base_comparisons.items():
        for v in comp.get("versions", {}):
            fws = {frameworks.framework_of(comp[s]) for s in ("reference", "candidate")}
            rust = [fw for fw in fws if fw in releases]
            ok = [
                v in releases[fw][1:] or (v not in releases[fw] and buildable(fw, v)) for fw in rust
            ]
            if not any(ok):
                problems.append(
                    ConfigError(
                        f"{where}.comparisons.{cname}.versions",
                        f"{v} is not a further release of "
                        f"{' or '.join(sorted(fws & set(releases))) or 'a Rust framework'} "
                        f"here ({_listing(releases)})",
                    )
                )

    def add(release: str, what: str, name: str, value: dict) -> None:
        table = exp[what]
        if name in table:
            problems.append(
                ConfigError(
                    f"{where}.{what}.{name}",
                    f"the name is taken by {release}'s generated {what[:-1]}: rename it",
                )
            )
        table[name] = value

    for fw, versions in releases.items():
        fw_runs = [r for r, s in base_runs.items() if s["framework"] == fw]
        for v in versions[1:]:
            sfx, release = suffix(v), f"{fw} {v}"
            for r in fw_runs:
                settings = copy.deepcopy(base_runs[r])
                settings["version"] = v
                add(release, "runs", r + sfx, settings)
            differs = set()
            for cname, comp in base_comparisons.items():
                sides = {s: frameworks.framework_of(comp[s]) for s in ("reference", "candidate")}
                if sorted(sides.values()) != sorted(["torch", fw]) or fw == "torch":
                    continue
                twin = {k: val for k, val in comp.items() if k != "versions"}
                twin.update(comp.get("versions", {}).get(v, {}))
                for side, side_fw in sides.items():
                    if side_fw == fw:
                        twin[side] = comp[side] + sfx
                        if twin["expect"] != comp["expect"]:
                            differs.add(comp[side])
                add(release, "comparisons", cname + sfx, twin)
            for r in fw_runs:
                add(
                    release,
                    "comparisons",
                    r + sfx + VS_PRIMARY,
                    {
                        "reference": r,
                        "candidate": r + sfx,
                        "expect": "fail" if r in differs else "pass",
                        "tolerance": float(config["tolerance"]),
                    },
                )
    for comp in exp["comparisons"].values():
        comp.pop("versions", None)
    return problems


def _listing(releases: Mapping[str, list[str]]) -> str:
    return "; ".join(f"{fw}: {', '.join(vs)}" for fw, vs in releases.items())
