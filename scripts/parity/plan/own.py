"""A user's own model in the plan (config ``model: {family: own, …}``, docs/own-model.md).

While the DAG is built, :func:`resolve_model` turns the config's model entry into the
resolved model the rest of the plan reads like any family's: its parameters in
state_dict order (``params``, so ``parity.core.models.model_params`` works as for the
built-in families), the tied weights, the buffers handed to the Rust side, what the Rust
``build`` receives (``rust_config``), and what a sample is (``io``: token ids or floats, the
targets). The parameters come from the PyTorch model itself (its model card,
:mod:`parity.own.card`), which takes seconds to build (transformers imports slowly), so it
runs in a subprocess once (watched: :mod:`parity.core.usercode`) and is kept in
``results/own/{experiment}/card.json`` by a hash of what it depends on: the model spec, the
factory's file and the Python files beside it, and the installed torch and transformers. A
changed factory elsewhere on the path is not seen here; the fixture job builds the real
model and refuses a card that no longer matches.

Pure Python (the card is a subprocess); cheap when the card is kept.
"""

from __future__ import annotations

import copy
import hashlib
import importlib.metadata
import json
import math
import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from parity.core import usercode, userpath, userproc
from parity.core.config import ConfigError, canonical_hash
from parity.plan.datafile import safetensors_header
from parity.plan.limits import DEFAULTS

#: Where an experiment's model card is kept (``{experiment}``).
CARD = "results/own/{experiment}/card.json"
#: The model card's format, part of its key: a card kept from an older format is made
#: again (2: ``frozen`` added).
CARD_FORMAT = 2
#: The Rust frameworks an own model can be ported to (each has its runner library:
#: ``candle_parity``, ``burn_parity``).
RUST_SIDES = ("candle", "burn")
#: The registry of a runner crate's built-in ports (``{framework}``): one
#: ``"name" => module::Type,`` line per family in its ``port_registry!`` list.
FAMILIES_RS = Path(__file__).resolve().parents[3] / "rust/{framework}-parity/src/families/mod.rs"


def builtin_families(framework: str) -> list[str]:
    """The built-in families of ``framework``'s runner crate, read from its registry
    (:data:`FAMILIES_RS`), in its order."""
    text = Path(str(FAMILIES_RS).format(framework=framework)).read_text(encoding="utf-8")
    block = text[text.index("port_registry!") :]
    return re.findall(r'^\s*"([a-z][a-z0-9_]*)"\s*=>', block, flags=re.M)


def _versions() -> dict[str, str]:
    out = {"python": sys.version.split()[0]}
    for dist in ("torch", "transformers"):
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            out[dist] = ""
    return out


def factory_file(
    spec: Mapping[str, Any], workdir: str | os.PathLike, key: str = "factory"
) -> Path | None:
    """The Python file a factory ``file.py:function`` names (``spec[key]``, relative to
    ``workdir``; the model's ``factory`` or the ``optimizer``), or None for a module path, a
    ``transformers`` class or no such key. Symbolic links are followed as far as they lead
    (``os.path.realpath``, which never raises: a loop is left for :func:`check_paths` to
    name)."""
    target = factory_target(spec, key)
    return None if target is None else Path(os.path.realpath(Path(workdir) / target))


def factory_target(spec: Mapping[str, Any], key: str = "factory") -> str | None:
    """The file part of a ``file.py:function`` reference (``spec[key]``), as written; None
    for a module path, a ``transformers`` class or no such key."""
    ref = spec.get(key)
    if not ref:
        return None
    target = ref.rpartition(":")[0]
    return target if target.endswith(".py") or "/" in target else None


def card_key(spec: Mapping[str, Any], workdir: str | os.PathLike) -> str:
    """What a model card depends on, hashed: the spec, the factory's file and every ``.py``
    file beside it (the modules it is likely to import), and the installed versions."""
    key = {"spec": spec, "versions": _versions(), "format": CARD_FORMAT}
    h = hashlib.sha256(canonical_hash(key).encode())
    # the model factory's folder, and the optimizer factory's (model.torch.optimizer)
    folders = {
        f.parent
        for f in (factory_file(spec, workdir), factory_file(spec, workdir, "optimizer"))
        if f is not None and f.is_file()
    }
    for folder in sorted(folders):
        for p in sorted(folder.glob("*.py")):
            h.update(p.name.encode())
            try:
                h.update(p.read_bytes())
            except OSError as e:  # a file beside the factory that cannot be read
                h.update(f"unreadable: {e.strerror}".encode())
    return h.hexdigest()


def model_card(
    where: str,
    experiment: str,
    spec: Mapping[str, Any],
    workdir: str | os.PathLike,
    limit: float = DEFAULTS["user_code_idle_seconds"],
) -> dict:
    """The model card of ``spec`` (config ``model.torch``): kept in :data:`CARD` when its key
    matches, else made by ``python -m parity.own.card`` in ``workdir`` and kept.

    The subprocess runs the user's code: what it prints (at import, say) is relayed to
    standard error, each line prefixed ``[<experiment> model card]``, never parsed; while
    it runs, a line every 30 s says what the plan waits on; after ``limit`` seconds
    (``limits.user_code_idle_seconds``) without progress (a line of output, the next call
    into the user's code) it is stopped (:func:`parity.core.userproc.run_watched`). Raises
    :class:`ConfigError` at ``where`` with the reason a model cannot be built, or naming
    the factory, the experiment, the pid and where it hung."""
    key = card_key(spec, workdir)
    path = Path(workdir) / CARD.format(experiment=experiment)
    try:
        kept = json.loads(path.read_text(encoding="utf-8"))
        if kept.get("key") == key:
            return kept["card"]
    except (OSError, ValueError, AttributeError):
        pass
    for ref in ("factory", "optimizer"):
        target = factory_target(spec, ref)
        if target is not None:
            userpath.check(f"{where}.{ref}", target, "file", workdir)
    scripts = Path(__file__).resolve().parents[2]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(scripts), env.get("PYTHONPATH")]))
    what = f"{usercode.factory_label(spec, workdir)} of experiment {experiment}"
    try:
        result, status, output = userproc.run_for_json(
            [sys.executable, "-m", "parity.own.card"],
            spec,
            what,
            limit,
            cwd=workdir,
            env=env,
            prefix=f"[{experiment} model card] ",
            folder=usercode.factory_folder(spec, workdir),
        )
    except usercode.UserCodeStuck as e:
        raise ConfigError(where, f"building the PyTorch model: {e}") from None
    if "error" in result:
        raise ConfigError(where, f"the PyTorch model cannot be built: {result['error']}")
    if status != 0 or "card" not in result:
        raise ConfigError(
            where,
            f"the PyTorch model cannot be built: building its card ({what}) "
            f"{userproc.ended(status, output)}",
        )
    card = result["card"]
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({"key": key, "card": card}, sort_keys=True), encoding="utf-8")
    tmp.replace(path)
    return card


def _io(
    where: str,
    data: Mapping[str, Any],
    loss: str,
    card: Mapping[str, Any],
    workdir: str | os.PathLike | None = None,
) -> dict:
    """What one sample is: ``input`` (``{"kind": "tokens", "shape": [T], "vocab": V}`` or
    ``{"kind": "float", "shape": […]}``) and ``target`` (``{"kind": "tokens"}``, the next
    token of each position; ``{"kind": "classes", "classes": C}``; ``{"kind": "float",
    "shape": […]}``), from config ``data`` and the loss (a data file relative to
    ``workdir``, default the current folder)."""
    kinds = [k for k in ("tokens", "inputs", "file") if k in data]
    if len(kinds) != 1:
        raise ConfigError(
            f"{where}.data",
            "an own model's data is one of tokens: {seq_len}, inputs: {shape} with targets, "
            f"or file: <safetensors with x and y>; found {kinds or 'none of them'}",
        )
    if "tokens" in data:
        vocab = data["tokens"].get("vocab") or card.get("vocab")
        if not vocab:
            raise ConfigError(
                f"{where}.data.tokens.vocab",
                "the model's config has no vocab_size: give the token range here",
            )
        if loss != "cross_entropy":
            raise ConfigError(
                f"{where}.loss", "token data is trained on the next-token cross_entropy"
            )
        return {
            "input": {"kind": "tokens", "shape": [data["tokens"]["seq_len"]], "vocab": vocab},
            "target": {"kind": "tokens"},
        }
    if "file" in data:
        return _file_io(where, data, loss, card, workdir)
    targets = data.get("targets")
    if targets is None:
        raise ConfigError(f"{where}.data.targets", "inputs need targets: {shape} or {classes}")
    if "classes" in targets:
        if loss != "cross_entropy":
            raise ConfigError(f"{where}.loss", "class targets are trained on cross_entropy")
        target = {"kind": "classes", "classes": targets["classes"]}
    else:
        if loss != "mse":
            raise ConfigError(f"{where}.loss", "float targets (targets: {shape}) need loss mse")
        target = {"kind": "float", "shape": list(targets["shape"])}
    return {"input": {"kind": "float", "shape": list(data["inputs"]["shape"])}, "target": target}


def _file_io(
    where: str,
    data: Mapping[str, Any],
    loss: str,
    card: Mapping[str, Any],
    workdir: str | os.PathLike | None = None,
) -> dict:
    """``io`` of the user's own data file (``data.file``, relative to ``workdir``): ``x``
    int64 is token ids (with ``y`` the next tokens, int64 of the same shape), else float
    inputs; ``y`` int64 of two dimensions is class labels, a float ``y`` the targets. The
    file's header is checked whole (:func:`safetensors_header`); ``io["file"]`` is the path
    as the config gives it."""
    path = Path(data["file"])
    full = userpath.check(f"{where}.data.file", path, "file", workdir)
    try:
        tensors = safetensors_header(full)
    except (OSError, ValueError) as e:
        raise ConfigError(
            f"{where}.data.file", f"{path}: not a readable safetensors file ({e})"
        ) from None
    lead = [data["batches"], data["batch_size"]]
    for name in ("x", "y"):
        if name not in tensors:
            raise ConfigError(f"{where}.data.file", f"{path} has no tensor {name!r}")
        shape = tensors[name].get("shape", [])
        if shape[:2] != lead:
            raise ConfigError(
                f"{where}.data.file",
                f"{path}: {name} has shape {shape}; its first two dimensions must be "
                f"data.batches and data.batch_size {lead}",
            )
    x, y = tensors["x"], tensors["y"]
    if x["dtype"] == "I64":
        vocab = card.get("vocab")
        if not vocab or y["dtype"] != "I64" or y["shape"] != x["shape"]:
            raise ConfigError(
                f"{where}.data.file",
                f"{path}: int64 x is token ids; y must be the next tokens (int64, shape "
                f"{x['shape']}) and the model's config must have a vocab_size",
            )
        if loss != "cross_entropy":
            raise ConfigError(
                f"{where}.loss", "token data is trained on the next-token cross_entropy"
            )
        return {
            "input": {"kind": "tokens", "shape": x["shape"][2:], "vocab": vocab},
            "target": {"kind": "tokens"},
            "file": str(path),
        }
    if x["dtype"] not in ("F32", "F64") or y["dtype"] not in ("F32", "F64", "I64"):
        raise ConfigError(
            f"{where}.data.file", f"{path}: x and y must be float32, float64 or int64"
        )
    if y["dtype"] == "I64":
        if len(y["shape"]) != 2 or loss != "cross_entropy":
            raise ConfigError(
                f"{where}.data.file",
                f"{path}: int64 y is class labels [batches, batch_size] for cross_entropy",
            )
        target = {"kind": "classes", "classes": 2}
    else:
        if loss != "mse":
            raise ConfigError(f"{where}.loss", "float targets need loss mse")
        target = {"kind": "float", "shape": y["shape"][2:]}
    return {
        "input": {"kind": "float", "shape": x["shape"][2:]},
        "target": target,
        "file": str(path),
    }


def check_crate(key: str, crate: str | os.PathLike, workdir: str | os.PathLike) -> Path:
    """The resolved folder of a user's crate (config ``model.<side>.crate``, relative to
    ``workdir``): a readable folder whose ``Cargo.toml`` is a readable TOML file with a
    ``[package]`` name, what the build job reads first (its ``parity-common`` dependency is
    the build's to check: :func:`port_manifest_problem`). Raises :class:`ConfigError` at
    ``key`` naming what is wrong."""
    import tomllib

    folder = userpath.check(key, crate, "folder", workdir)
    manifest, why = userpath.problem("Cargo.toml", "file", folder)
    if not os.path.lexists(folder / "Cargo.toml"):
        raise ConfigError(key, f"{folder} has no Cargo.toml: not a crate")
    if why is not None:
        raise ConfigError(key, f"{why}: not a readable Cargo.toml")
    try:
        with open(manifest, "rb") as f:
            doc = tomllib.load(f)
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise ConfigError(key, f"{manifest}: not a readable Cargo.toml ({e})") from None
    package = doc.get("package")
    if not isinstance(package, dict) or not isinstance(package.get("name"), str):
        raise ConfigError(key, f"{manifest} has no [package] name: not a library crate")
    return folder


#: This checkout's Rust workspace (the runner crates, parity-common).
RUST_DIR = Path(__file__).resolve().parents[3] / "rust"


def port_manifest_problem(
    doc: Mapping[str, Any],
    crate: str | os.PathLike,
    framework: str,
    rust_dir: str | os.PathLike = RUST_DIR,
) -> str | None:
    """Why a port crate's parsed ``Cargo.toml`` (``doc``, of the crate in folder ``crate``)
    does not depend on ``rust_dir``'s ``parity-common`` with the ``framework`` feature
    (``features = ["candle"]``), naming the line to write; None when it does. Every value
    is checked for its type first (a ``[dependencies]`` that is not a table, a ``path``
    that is not text, ``features`` that are not a list), and the path is followed as the
    file system follows it (``os.path.realpath``, which never raises)."""
    ours = Path(os.path.realpath(Path(rust_dir) / "parity-common"))
    want = f'parity-common = {{ path = "{ours}", features = ["{framework}"] }}'
    deps = doc.get("dependencies", {})
    dep = deps.get("parity-common") if isinstance(deps, dict) else None
    if not isinstance(dep, dict) or not isinstance(dep.get("path"), str):
        return (
            f"the port must depend on this workflow's parity-common, for its {framework} "
            f"trait; add to [dependencies]: {want}"
        )
    theirs = Path(os.path.realpath(Path(crate) / dep["path"]))
    if theirs != ours:
        return (
            f"parity-common is {theirs}, another checkout's (its trait would not be the one "
            f"this workflow's runner calls); point it at {ours}: {want}"
        )
    features = dep.get("features", [])
    if not isinstance(features, list) or framework not in features:
        return f'parity-common needs features = ["{framework}"]'
    return None


def resolve_model(
    where: str,
    experiment: str,
    exp: Mapping[str, Any],
    workdir: str | os.PathLike,
    limit: float = DEFAULTS["user_code_idle_seconds"],
) -> dict:
    """Config ``experiments.<experiment>.model`` of family ``own`` resolved (module docs):
    ``torch``, the Rust sides with their crate paths made absolute (relative to
    ``workdir``; a side naming a built-in port of its runner crate, ``family``, is checked
    against the crate's registry), ``rename`` per side, and from the model card ``params``,
    ``tied``, ``frozen``, ``other_buffers`` (the model's buffers not handed over),
    ``buffers`` (those named in ``model.buffers``, with their shapes), ``rust_config``,
    ``io`` and ``card_sha256``. Raises :class:`ConfigError` listing every problem: a model
    that cannot be built, a source of randomness, a buffer or a rename that does not exist,
    a crate folder without a Cargo.toml, a built-in port the runner crate does not have, a
    model file that hangs for ``limit`` seconds (``limits.user_code_idle_seconds``)."""
    model = copy.deepcopy(dict(exp["model"]))
    spec = model["torch"]
    card = model_card(f"{where}.torch", experiment, spec, workdir, limit)
    problems: list[ConfigError] = []
    if card["randomness"]:
        problems.append(
            ConfigError(
                f"{where}.torch",
                "the model is random in training mode, which no two frameworks can reproduce "
                f"alike: {'; '.join(card['randomness'])}; set every dropout to 0",
            )
        )
    names = [n for n, _ in card["params"]]
    buffers = {}
    for b in model.get("buffers") or []:
        if b not in card["buffers"]:
            problems.append(
                ConfigError(
                    f"{where}.buffers",
                    f"the model has no buffer {b!r} (it has "
                    f"{', '.join(card['buffers']) or 'none'})",
                )
            )
        else:
            buffers[b] = card["buffers"][b]
    for side in RUST_SIDES:
        if side not in model:
            continue
        if "family" in model[side]:
            known = builtin_families(side)
            if model[side]["family"] not in known:
                problems.append(
                    ConfigError(
                        f"{where}.{side}.family",
                        f"{side}-parity has no built-in port {model[side]['family']!r} "
                        f"(it has {', '.join(known)})",
                    )
                )
        else:
            try:
                crate = check_crate(f"{where}.{side}.crate", model[side]["crate"], workdir)
            except ConfigError as e:
                problems.append(e)
                crate = Path(workdir, model[side]["crate"])
            model[side] = {**model[side], "crate": str(crate)}
        renamed: dict[str, str] = {}
        for rust_name, torch_name in (model.get("rename", {}).get(side) or {}).items():
            if torch_name in renamed:
                problems.append(
                    ConfigError(
                        f"{where}.rename.{side}.{rust_name}",
                        f"{torch_name!r} is already the key of Rust tensor "
                        f"{renamed[torch_name]!r}: one state_dict key, one Rust name",
                    )
                )
            renamed.setdefault(torch_name, rust_name)
            if torch_name not in names and torch_name not in buffers:
                problems.append(
                    ConfigError(
                        f"{where}.rename.{side}.{rust_name}",
                        f"{torch_name!r} is not a parameter or handed-over buffer of the model",
                    )
                )
    try:
        io = _io(where.rsplit(".", 1)[0], exp["data"], exp["loss"], card, workdir)
    except ConfigError as e:
        problems.append(e)
        io = {}
    if problems:
        raise ConfigError.every(problems)
    model.update(
        name=experiment,
        params=card["params"],
        tied=card["tied"],
        frozen=card["frozen"],
        buffers=buffers,
        other_buffers=[b for b in card["buffers"] if b not in buffers],
        rust_config=card["rust_config"],
        io=io,
        card_sha256=canonical_hash(card),
    )
    model.setdefault("rename", {})
    return model


def expected_output(model: Mapping[str, Any], batch: int) -> list[int] | None:
    """The shape the loss needs of the model's output for a batch of ``batch`` samples:
    ``[B, T, vocab]`` for tokens, ``[B, classes]`` for class labels (the class count of a
    data file is not known: None), ``[B, *shape]`` for float targets."""
    io = model["io"]
    if io["target"]["kind"] == "tokens":
        return [batch, *io["input"]["shape"], io["input"]["vocab"]]
    if io["target"]["kind"] == "classes":
        return None if "file" in io else [batch, io["target"]["classes"]]
    return [batch, *io["target"]["shape"]]


def outputs(model: Mapping[str, Any]) -> int:
    """Elements of one sample's output the loss compares: the vocabulary per position for
    tokens, the classes, or the target's size."""
    io = model["io"]
    if io["target"]["kind"] == "tokens":
        return io["input"]["vocab"] * io["input"]["shape"][0]
    if io["target"]["kind"] == "classes":
        return io["target"]["classes"]
    if io["target"]["kind"] == "float":
        return math.prod(io["target"]["shape"])
    return 1
