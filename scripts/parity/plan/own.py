"""A user's own model in the plan (config ``model: {family: own, …}``, docs/own-model.md).

While the DAG is built, :func:`resolve_model` turns the config's model entry into the
resolved model the rest of the plan reads like any family's: its parameters in
state_dict order (``params``, so ``parity.core.models.model_params`` works as for the
built-in families), the tied weights, the buffers handed to the Rust side, what the Rust
``build`` receives (``rust_config``), and what a sample is (``io``: token ids or floats, the
targets). The parameters come from the PyTorch model itself (its model card,
:mod:`parity.own.card`), which takes seconds to build (transformers imports slowly), so it
runs in a subprocess once and is kept in ``results/own/{experiment}/card.json`` by a hash
of what it depends on: the model spec, the factory's file and the Python files beside it,
and the installed torch and transformers. A changed factory elsewhere on the path is not
seen here; the fixture job builds the real model and refuses a card that no longer matches.

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
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from parity.core.config import ConfigError, canonical_hash

#: Where an experiment's model card is kept (``{experiment}``).
CARD = "results/own/{experiment}/card.json"
#: The model card's format, part of its key: a card kept from an older format is made
#: again (2: ``frozen`` added).
CARD_FORMAT = 2
#: Seconds the model card may take (importing transformers and building the model).
CARD_TIMEOUT = 900
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
    ``transformers`` class or no such key."""
    ref = spec.get(key)
    if not ref:
        return None
    target = ref.rpartition(":")[0]
    if target.endswith(".py") or "/" in target:
        return (Path(workdir) / target).resolve()
    return None


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
            h.update(p.read_bytes())
    return h.hexdigest()


def model_card(
    where: str, experiment: str, spec: Mapping[str, Any], workdir: str | os.PathLike
) -> dict:
    """The model card of ``spec`` (config ``model.torch``): kept in :data:`CARD` when its key
    matches, else made by ``python -m parity.own.card`` in ``workdir`` and kept. Raises
    :class:`ConfigError` at ``where`` with the reason a model cannot be built."""
    key = card_key(spec, workdir)
    path = Path(workdir) / CARD.format(experiment=experiment)
    try:
        kept = json.loads(path.read_text(encoding="utf-8"))
        if kept.get("key") == key:
            return kept["card"]
    except (OSError, ValueError, AttributeError):
        pass
    f = factory_file(spec, workdir)
    if f is not None and not f.is_file():
        raise ConfigError(f"{where}.factory", f"{f} is not a file")
    scripts = Path(__file__).resolve().parents[2]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(scripts), env.get("PYTHONPATH")]))
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "parity.own.card"],
            input=json.dumps(spec),
            capture_output=True,
            text=True,
            cwd=workdir,
            env=env,
            timeout=CARD_TIMEOUT,
        )
    except subprocess.TimeoutExpired:
        raise ConfigError(
            where, f"building the PyTorch model took more than {CARD_TIMEOUT} s"
        ) from None
    if proc.returncode != 0:
        lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
        reason = lines[-1] if lines else f"exit status {proc.returncode}"
        raise ConfigError(where, f"the PyTorch model cannot be built: {reason}")
    card = json.loads(proc.stdout)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({"key": key, "card": card}, sort_keys=True), encoding="utf-8")
    tmp.replace(path)
    return card


def _io(where: str, data: Mapping[str, Any], loss: str, card: Mapping[str, Any]) -> dict:
    """What one sample is: ``input`` (``{"kind": "tokens", "shape": [T], "vocab": V}`` or
    ``{"kind": "float", "shape": […]}``) and ``target`` (``{"kind": "tokens"}``, the next
    token of each position; ``{"kind": "classes", "classes": C}``; ``{"kind": "float",
    "shape": […]}``), from config ``data`` and the loss."""
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
        return _file_io(where, data, loss, card)
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


#: The most header bytes a data file may declare (safetensors' own limit is 100 MB).
MAX_HEADER = 100_000_000


def safetensors_header(path: Path) -> dict:
    """The tensors a safetensors file declares (name → ``{"dtype", "shape"}``), read from its
    header alone. Raises ``ValueError`` naming what is wrong."""
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) != 8:
            raise ValueError("too short for a safetensors header")
        n = int.from_bytes(head, "little")
        if n > MAX_HEADER:
            raise ValueError(f"declares a header of {n} bytes")
        text = f.read(n)
    doc = json.loads(text)
    return {k: v for k, v in doc.items() if k != "__metadata__"}


def _file_io(where: str, data: Mapping[str, Any], loss: str, card: Mapping[str, Any]) -> dict:
    """``io`` of the user's own data file (``data.file``): ``x`` int64 is token ids (with
    ``y`` the next tokens, int64 of the same shape), else float inputs; ``y`` int64 of two
    dimensions is class labels, a float ``y`` the targets."""
    path = Path(data["file"])
    try:
        tensors = safetensors_header(path)
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


def resolve_model(
    where: str, experiment: str, exp: Mapping[str, Any], workdir: str | os.PathLike
) -> dict:
    """Config ``experiments.<experiment>.model`` of family ``own`` resolved (module docs):
    ``torch``, the Rust sides with their crate paths made absolute (relative to
    ``workdir``; a side naming a built-in port of its runner crate, ``family``, is checked
    against the crate's registry), ``rename`` per side, and from the model card ``params``,
    ``tied``, ``frozen``, ``other_buffers`` (the model's buffers not handed over),
    ``buffers`` (those named in ``model.buffers``, with their shapes), ``rust_config``,
    ``io`` and ``card_sha256``. Raises :class:`ConfigError` listing every problem: a model
    that cannot be built, a source of randomness, a buffer or a rename that does not exist,
    a crate folder without a Cargo.toml, a built-in port the runner crate does not have."""
    model = copy.deepcopy(dict(exp["model"]))
    spec = model["torch"]
    card = model_card(f"{where}.torch", experiment, spec, workdir)
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
            crate = Path(workdir, model[side]["crate"]).resolve()
            if not (crate / "Cargo.toml").is_file():
                problems.append(
                    ConfigError(f"{where}.{side}.crate", f"{crate} has no Cargo.toml: not a crate")
                )
            model[side] = {**model[side], "crate": str(crate)}
        for rust_name, torch_name in (model.get("rename", {}).get(side) or {}).items():
            if torch_name not in names and torch_name not in buffers:
                problems.append(
                    ConfigError(
                        f"{where}.rename.{side}.{rust_name}",
                        f"{torch_name!r} is not a parameter or handed-over buffer of the model",
                    )
                )
    try:
        io = _io(where.rsplit(".", 1)[0], exp["data"], exp["loss"], card)
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
