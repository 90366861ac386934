"""The PyTorch side of a user's own model: building it, its forward pass, what makes it
random, and the forward hooks that name its intermediates after its module paths.

A model is named in the config (``model.torch``) in one of two ways:

* ``factory: "my_models/tiny.py:make_model"`` (a Python file, relative to the working
  directory, or an importable module ``my_models.tiny:make_model``) with ``kwargs``: the
  function is called with the keyword arguments and must return a ``torch.nn.Module``;
* ``transformers: LlamaForCausalLM`` with ``config`` (the keyword arguments of the class's
  ``config_class``): built from the config alone (no download), with eager attention
  (``attn_implementation: eager`` unless the config says otherwise) and no cache.

The model's forward takes the batch's inputs ``x`` (``[B, T]`` int64 token ids, or
``[B, …]`` floats) and returns its output: a tensor, a tuple whose first item is a tensor,
or an object with ``logits`` (a ``transformers`` output). :func:`output_of` takes that
tensor. Each call into the user's code reports its progress
(:func:`parity.core.usercode.progress`) to the watchdog of the job that makes it. Imports
torch (and transformers when asked for): run in jobs and in the model-card subprocess, never
while the DAG is built.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Self

import torch
from torch import nn

from parity.core import usercode


class OwnModelError(RuntimeError):
    """A model that cannot be built or run as the config names it; the message names the
    config key (``model.torch.factory``) or the module path and says why."""


def _import_factory(ref: str, key: str = "model.torch.factory"):
    """The callable ``ref`` names (``path/to/file.py:function`` or ``package.module:function``),
    the config's ``key``. Raises :class:`OwnModelError` when the file or module does not
    import or lacks it."""
    target, sep, func = ref.rpartition(":")
    if not sep or not target or not func.isidentifier():
        raise OwnModelError(f"{key}: {ref!r} is not 'file.py:function' or 'module:function'")
    try:
        if target.endswith(".py") or "/" in target:
            path = Path(target).resolve()
            if not path.is_file():
                raise OwnModelError(f"{key}: {path} is not a file")
            name = f"parity_own_factory_{abs(hash(str(path)))}"
            spec = importlib.util.spec_from_file_location(name, path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            # the factory's folder on the path, for the modules it imports beside it
            sys.path.insert(0, str(path.parent))
            usercode.progress(f"the import of {path}")
            try:
                spec.loader.exec_module(module)
            finally:
                sys.path.remove(str(path.parent))
        else:
            if "" not in sys.path and str(Path.cwd()) not in sys.path:
                sys.path.insert(0, str(Path.cwd()))
            usercode.progress(f"the import of {target}")
            module = importlib.import_module(target)
    except OwnModelError:
        raise
    except Exception as e:
        raise OwnModelError(f"{key}: {target} does not import: {type(e).__name__}: {e}") from e
    fn = getattr(module, func, None)
    if not callable(fn):
        raise OwnModelError(f"{key}: {target} has no function {func!r}")
    return fn


def own_optimizer(ref: str, module: nn.Module):
    """The user's own ``torch.optim`` optimizer and scheduler (config
    ``model.torch.optimizer``, docs/loop.md "Your own loop"): the function ``ref`` names,
    called with the model, returns an optimizer, or ``(optimizer, scheduler)`` where the
    scheduler (an ``lr_scheduler``, or None) is stepped after each optimizer step. Raises
    :class:`OwnModelError` for a function that fails or returns something else."""
    key = "model.torch.optimizer"
    fn = _import_factory(ref, key)
    usercode.progress(f"the call of the optimizer factory {ref}")
    try:
        made = fn(module)
    except Exception as e:
        raise OwnModelError(f"{key}: {ref} raised {type(e).__name__}: {e}") from e
    opt, scheduler = made if isinstance(made, tuple) and len(made) == 2 else (made, None)
    if not isinstance(opt, torch.optim.Optimizer):
        raise OwnModelError(
            f"{key}: {ref} returned a {type(opt).__name__}, not a torch.optim.Optimizer "
            "(or an (optimizer, scheduler) pair)"
        )
    if scheduler is not None and not callable(getattr(scheduler, "step", None)):
        raise OwnModelError(
            f"{key}: {ref}'s scheduler, a {type(scheduler).__name__}, has no step()"
        )
    return opt, scheduler


def _transformers_class(name: str):
    usercode.progress("the import of transformers")
    try:
        import transformers
    except ImportError as e:  # pinned in requirements.txt, so only a broken install
        raise OwnModelError(f"model.torch.transformers: transformers does not import: {e}") from e
    cls = getattr(transformers, name, None)
    if cls is None or not isinstance(cls, type) or not issubclass(cls, nn.Module):
        near = [n for n in dir(transformers) if n.lower() == name.lower()]
        hint = f" (did you mean {near[0]}?)" if near else ""
        raise OwnModelError(
            f"model.torch.transformers: transformers {transformers.__version__} has no "
            f"model class {name!r}{hint}"
        )
    return cls


def transformers_config(spec: Mapping[str, Any]):
    """The ``config_class`` instance of a ``transformers`` model spec: the config mapping
    with eager attention unless it names another, and no cache. Raises
    :class:`OwnModelError` when the class or its config refuses the mapping."""
    cls = _transformers_class(spec["transformers"])
    kwargs = dict(spec.get("config") or {})
    kwargs.setdefault("attn_implementation", "eager")
    kwargs.setdefault("use_cache", False)
    try:
        return cls.config_class(**kwargs)
    except Exception as e:
        raise OwnModelError(
            f"model.torch.config: {cls.config_class.__name__} refuses it: {type(e).__name__}: {e}"
        ) from e


@contextlib.contextmanager
def default_dtype(dtype: torch.dtype) -> Iterator[None]:
    """``torch.set_default_dtype`` for the block, restored after it."""
    before = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(before)


def build(
    spec: Mapping[str, Any], dtype: torch.dtype = torch.float64, device: str = "cpu"
) -> nn.Module:
    """The model ``spec`` (config ``model.torch``) names, its parameters created in
    ``dtype`` on ``device`` (``"meta"``: shapes only, nothing allocated). The caller seeds
    torch's generator first when the initial values matter (the fixture). Raises
    :class:`OwnModelError` for a factory that does not import or returns no module, a
    class or config that does not exist or refuses, or a module whose parameters are not
    in ``dtype``."""
    with default_dtype(dtype), torch.device(device):
        if "transformers" in spec:
            cls = _transformers_class(spec["transformers"])
            config = transformers_config(spec)
            usercode.progress(f"building transformers.{spec['transformers']}")
            try:
                model = cls(config)
            except Exception as e:
                raise OwnModelError(
                    f"model.torch: {spec['transformers']} cannot be built from its config: "
                    f"{type(e).__name__}: {e}"
                ) from e
        else:
            fn = _import_factory(spec["factory"])
            usercode.progress(f"the call of {spec['factory']}")
            try:
                model = fn(**dict(spec.get("kwargs") or {}))
            except Exception as e:
                raise OwnModelError(
                    f"model.torch.factory: {spec['factory']} raised {type(e).__name__}: {e}"
                ) from e
    if not isinstance(model, nn.Module):
        raise OwnModelError(
            f"model.torch.factory: {spec.get('factory')} returned a {type(model).__name__}, "
            "not a torch.nn.Module"
        )
    wrong = [n for n, p in model.named_parameters() if p.dtype != dtype]
    if wrong:
        raise OwnModelError(
            f"model.torch: parameters {wrong[:5]} are not {dtype} although the model was "
            "built with that default dtype (a dtype fixed in the model's code cannot run in "
            "both float32 and float64)"
        )
    return model


def rust_config(spec: Mapping[str, Any], model: nn.Module | None = None) -> dict:
    """What the Rust side's ``build`` receives as its config: a ``transformers`` model's
    config as the model used it (``config.to_dict()``, as ``config.json`` would hold it), a
    factory's keyword arguments."""
    if "transformers" in spec:
        config = model.config if model is not None else transformers_config(spec)
        out = config.to_dict()
        out.pop("transformers_version", None)  # not a setting; varies with the install
        return out
    return dict(spec.get("kwargs") or {})


def output_of(result: Any) -> torch.Tensor:
    """The tensor a model's forward returned: itself, the first item of a tuple, or the
    ``logits`` of a ``transformers`` output. Raises :class:`OwnModelError` otherwise."""
    if isinstance(result, torch.Tensor):
        return result
    logits = getattr(result, "logits", None)
    if isinstance(logits, torch.Tensor):
        return logits
    if isinstance(result, (tuple, list)) and result and isinstance(result[0], torch.Tensor):
        return result[0]
    raise OwnModelError(
        f"the model's forward returned a {type(result).__name__}; return a tensor, a tuple "
        "starting with one, or an object with logits"
    )


def forward(model: nn.Module, spec: Mapping[str, Any], x: torch.Tensor) -> torch.Tensor:
    """The model's output for inputs ``x`` (a ``transformers`` model without a cache)."""
    if "transformers" in spec:
        return output_of(model(input_ids=x, use_cache=False))
    return output_of(model(x))


def active_randomness(model: nn.Module) -> list[str]:
    """What makes the model's training forward pass random, by module path (``""`` is the
    model): every dropout module with p > 0, and every ``*dropout*`` or ``*_pdrop``
    setting above 0 of a ``transformers`` config (its attention dropout is applied
    functionally, not by a module). Empty when the forward pass is deterministic as far as
    this can tell (:func:`check_deterministic` runs it twice to be sure)."""
    out = []
    for name, m in model.named_modules():
        if isinstance(m, nn.modules.dropout._DropoutNd) and m.p > 0:
            out.append(f"{name or '(model)'} ({type(m).__name__} p={m.p})")
    config = getattr(model, "config", None)
    if config is not None and hasattr(config, "to_dict"):
        for key, value in config.to_dict().items():
            if (
                ("dropout" in key or key.endswith("_pdrop"))
                and isinstance(value, (int, float))
                and value > 0
            ):
                out.append(f"config.{key} = {value}")
    return out


def check_deterministic(model: nn.Module, spec: Mapping[str, Any], x: torch.Tensor) -> None:
    """Run the forward pass twice in training mode on ``x`` and refuse a model whose two
    outputs differ bit for bit (randomness :func:`active_randomness` cannot see). Raises
    :class:`OwnModelError`."""
    model.train()
    with torch.no_grad():
        a = forward(model, spec, x)
        b = forward(model, spec, x)
    if not torch.equal(a, b):
        raise OwnModelError(
            "the model's forward pass in training mode gives different outputs for the same "
            "input: it draws random numbers (dropout, noise); set every such probability to 0"
        )


def unique_parameters(model: nn.Module) -> tuple[list[tuple[str, nn.Parameter]], dict[str, str]]:
    """The model's parameters in state_dict order, each tensor once under its first name,
    and the tied ones: alias → the name it is recorded under (an LM head sharing the
    embedding's weight: ``{"lm_head.weight": "model.embed_tokens.weight"}``)."""
    first: dict[int, str] = {}
    params, tied = [], {}
    for name, p in model.named_parameters(remove_duplicate=False):
        if id(p) in first:
            tied[name] = first[id(p)]
            continue
        first[id(p)] = name
        params.append((name, p))
    return params, tied


def buffers(model: nn.Module) -> dict[str, tuple[int, ...]]:
    """Every buffer (not trained, not compared): name → shape, persistent or not."""
    return {n: tuple(b.shape) for n, b in model.named_buffers()}


def quantity(path: str) -> str:
    """The name of a module's output among the intermediates: ``<module path>.out``, and
    ``output`` for the model's own output."""
    return f"{path}.out" if path else "output"


class Hooks:
    """Forward hooks on every submodule of ``model``: each module's output (its first call
    of a forward pass; a tuple's first tensor) under :func:`quantity` of its path, its
    gradient kept (``retain_grad``), and the dataflow between them.

    The dataflow of module ``m`` (:attr:`inputs`): the recorded outputs that ``m`` received
    as an input tensor, and the outputs of its direct submodules (what it is computed
    from); where neither exists (its input came from an op that is not a module, such as a
    residual addition), the output recorded just before ``m`` started. :attr:`order` lists
    the recorded quantities in the order their modules finished. Use as a context manager;
    the hooks are removed on exit.
    """

    def __init__(self, model: nn.Module):
        self.model = model
        self.outputs: dict[str, torch.Tensor] = {}
        self.order: list[str] = []
        self.inputs: dict[str, list[str]] = {}
        self.types: dict[str, str] = {}
        self._handles: list = []
        self._stack: list[str] = []
        self._children: dict[str, list[str]] = {}
        self._by_tensor: dict[int, str] = {}
        self._started: set[str] = set()

    def __enter__(self) -> Self:
        for path, module in self.model.named_modules():
            if not path:
                continue
            self._handles.append(
                module.register_forward_pre_hook(self._pre(path), with_kwargs=True)
            )
            self._handles.append(module.register_forward_hook(self._post(path), with_kwargs=True))
        return self

    def __exit__(self, *exc) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()

    def _pre(self, path: str):
        def hook(module, args, kwargs):
            if path in self._started:
                self._stack.append("")  # a second call: not recorded
                return None
            self._started.add(path)
            feeds = []
            for a in [*args, *kwargs.values()]:
                if isinstance(a, torch.Tensor) and id(a) in self._by_tensor:
                    feeds.append(self._by_tensor[id(a)])
            if not feeds and self.order:
                feeds = [self.order[-1]]
            self.inputs[quantity(path)] = feeds
            self._children[path] = []
            self._stack.append(path)
            return None

        return hook

    def _post(self, path: str):
        def hook(module, args, kwargs, result):
            top = self._stack.pop() if self._stack else ""
            if top != path:
                return None
            out = result
            if not isinstance(out, torch.Tensor):
                out = next((r for r in _tensors(result)), None)
            name = quantity(path)
            kids = [quantity(c) for c in self._children.pop(path, [])]
            self.inputs[name] = list(dict.fromkeys([*self.inputs.get(name, []), *kids]))
            if self._stack and self._stack[-1]:
                self._children.setdefault(self._stack[-1], []).append(path)
            if out is None or not out.is_floating_point():
                self.inputs.pop(name, None)
                return None
            if out.requires_grad:
                out.retain_grad()
            self.outputs[name] = out
            self.order.append(name)
            self.types[name] = type(module).__name__
            self._by_tensor[id(out)] = name
            return None

        return hook


def _tensors(obj: Any) -> Iterator[torch.Tensor]:
    """The tensors of a module's result, first first (tuples, lists, ``transformers``
    outputs, which iterate over their values)."""
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, (tuple, list)):
        for o in obj:
            yield from _tensors(o)
    elif hasattr(obj, "to_tuple"):
        yield from _tensors(obj.to_tuple())


class OwnNet:
    """The model an own model's PyTorch run trains (``parity.train.torch.train(…,
    net=OwnNet)``): the user's ``nn.Module`` (:func:`build`) in training mode, its
    parameters and handed-over buffers set from ``values`` (the fixture's, or a replay's
    state). ``params`` are the module's own parameters by state_dict key, each tied tensor
    once under its recorded name, in state_dict order; a forward with ``taps`` records
    every submodule's output through :class:`Hooks`, and :meth:`dataflow` says how they
    feed each other (``parity.localise.walk.own_quantities``)."""

    def __init__(self, model: Mapping[str, Any], values, names, device, dtype):
        import numpy as np

        self.model = model
        self.spec = model["torch"]
        self.module = build(self.spec, dtype, "cpu").to(device)
        params = dict(self.module.named_parameters())
        buffers_ = dict(self.module.named_buffers())
        with torch.no_grad():
            for n in names:
                params[n].copy_(torch.from_numpy(np.asarray(values[n])).to(dtype))
            for n in model.get("buffers") or {}:
                buffers_[n].copy_(torch.from_numpy(np.asarray(values[n])).to(buffers_[n].dtype))
        self.module.train()
        self.params = {n: params[n] for n in names}
        self.hooks = Hooks(self.module)
        # the user's code returned; the runner sets up its optimizer (torch's own code)
        usercode.progress("setting up the run after the model was built")

    def forward(self, x: torch.Tensor, fault=None, taps: dict | None = None) -> torch.Tensor:
        """The model's output for one batch ``x`` (:func:`forward`); with ``taps``, every
        submodule's output by :func:`quantity` of its path, and ``output``, the model's."""
        if taps is None:
            return forward(self.module, self.spec, x)
        with self.hooks as h:
            out = forward(self.module, self.spec, x)
        taps.update(h.outputs)
        if out.requires_grad:
            out.retain_grad()
        taps["output"] = out
        same = [n for n, t in h.outputs.items() if t is out]
        h.inputs["output"] = same or h.order[-1:]
        h.order.append("output")
        return out

    def dataflow(self, taps: Mapping[str, torch.Tensor]) -> list[dict]:
        """The forward quantities after a tapped forward, in the order their modules
        finished: name, the quantities it is computed from, its shape, its module's type."""
        h = self.hooks
        return [
            {
                "name": n,
                "inputs": h.inputs.get(n, []),
                "shape": list(taps[n].shape),
                "module": h.types.get(n, type(self.module).__name__),
            }
            for n in h.order
        ]
