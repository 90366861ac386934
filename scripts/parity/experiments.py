"""The experiment definitions: ``config.yaml`` resolved into runs and comparisons.

This is the one place that knows what an experiment means. ``rules/common.smk`` builds a
:class:`Plan` once (after JSON-schema validation) and every rule's inputs come from it; the
runners get their settings from :meth:`Plan.run_settings` and :meth:`Plan.runner_spec`.

Terms:

* *experiment*: a model, a loss, fixture data, an optimizer and a step count (config key
  ``experiments.<name>``);
* *run*: one side of an experiment, named after its framework (``torch``, ``candle``,
  ``candle_f32factors``, ``burn``); it may override the optimizer or a framework option;
* *run key*: (experiment, run, dtype, device), one job and one trace;
* *comparison*: a reference run against a candidate run on one device; ``main`` is the
  study's pair and writes the SPEC paths;
* *fault*: a deliberate mistake in one run (run setting ``fault``, or an existing setting
  such as a weight-decay mismatch); a *fault instance* (config ``faults.instances.<name>``)
  is such a run of a base experiment, ``<run>_fault_<name>``, compared as ``fault_<name>``
  with the clean run of the other side. Fault instances are not in the default target
  (README, "Detection power").

Pure Python: importing this module must stay cheap (it runs while the DAG is built).
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import math
import platform
import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

#: Frameworks, the reference first. A run's name starts with its framework.
FRAMEWORKS = ("torch", "candle", "burn")
#: Frameworks whose runs are Rust binaries speaking the frame protocol.
RUST_FRAMEWORKS = tuple(f for f in FRAMEWORKS if f != "torch")
DEVICES = ("cpu", "cuda", "metal")
DTYPES = ("f32", "f64")
RUN_NAME = re.compile(rf"^({'|'.join(FRAMEWORKS)})(_[a-z0-9]+)*$")
MAIN = "main"

#: The validity matrix, written once: (framework, device, dtype) cells that cannot run,
#: with the reason. Every other cell of FRAMEWORKS × DEVICES × DTYPES is supported.
UNSUPPORTED: dict[tuple[str, str, str], str] = {
    ("torch", "metal", "f64"): "PyTorch's MPS backend has no float64",
    ("candle", "metal", "f64"): "candle's Metal backend has no float64",
    # burn-parity is built with burn's ndarray backend only.
    **{
        ("burn", dev, dt): "burn-parity runs burn's ndarray backend, which is CPU only"
        for dev in ("cuda", "metal")
        for dt in ("f32", "f64")
    },
}

#: What a recorded step holds when the config says nothing (see config.yaml ``record``).
RECORD_DEFAULTS = {"every": 1, "tensors": None, "grads": False, "moments": False}

#: Diagnosis settings when the config gives none (see README, "Diagnosis").
DIAGNOSIS_DEFAULTS = {
    "f64_rounding_factor": 1000.0,
    "fp64_rule": {"multiplier": "auto", "atol": 1e-9},
}

#: Deliberate faults a run may carry (run setting ``fault: {kind, step}``), by the framework
#: that implements them, with what each does. Faults that an existing setting expresses
#: (weight decay, learning rate, betas, ``bias_correction: f32``, ``conv_impl: conv1d``) are
#: not repeated here. The config schema lists the same kinds; the candle runner implements
#: its own in ``parity_common::spec::Fault``.
FAULTS: dict[str, dict[str, str]] = {
    "candle": {
        "eps_in_sqrt": "AdamW divides by √(v̂ + ε) instead of √v̂ + ε",
        "no_bias_correction": "AdamW without bias correction (m̂ = m, v̂ = v)",
        "step_from_zero": "AdamW's step counter starts at 0 (bias correction for t − 1)",
        "mse_sum": "MSE summed over the elements instead of averaged",
        "transposed_weight": "every square MLP weight used as W instead of Wᵀ",
        "skip_update": "the optimizer step of one step skipped",
    },
    "torch": {
        "relu_grad_at_zero": "relu'(0) = 1 instead of PyTorch's 0 (candle 0.11.0's convention)",
    },
}
#: Faults in the AdamW update; the candle side has them in its hand-written AdamW only.
ADAMW_FAULTS = frozenset({"eps_in_sqrt", "no_bias_correction", "step_from_zero"})
#: What a Rust runner is told when a run has no fault (the spec field is always explicit).
NO_FAULT = {"kind": "none"}

#: PyTorch's name for each device of the workflow's device axis.
TORCH_DEVICE = {"cpu": "cpu", "cuda": "cuda", "metal": "mps"}


#: Where a run's trace and log go; the rules use these same patterns.
TRACE = "results/traces/{experiment}/{run}-{dtype}-{device}.parquet"
TRAIN_LOG = "results/logs/train/{experiment}/{run}-{dtype}-{device}.log"
#: Log of a comparison job (kind: perstep, split, diagnosis).
COMPARE_LOG = "results/logs/{kind}/{experiment}/{tag}.log"


class ConfigError(ValueError):
    """A config that passed the JSON schema but cannot run; the message starts with the
    offending key path (``experiments.a3_adam.comparisons.main.candidate: …``)."""

    def __init__(self, path: str, problem: str):
        super().__init__(f"config: {path}: {problem}")
        self.path = path
        #: Every problem found, this one included (see :meth:`every`).
        self.problems: list[ConfigError] = [self]

    @staticmethod
    def every(problems: list[ConfigError]) -> ConfigError:
        """One error for ``problems`` (non-empty): the problem itself when there is one,
        else a :class:`ConfigErrors` listing each, so a user fixes a config in one pass."""
        return problems[0] if len(problems) == 1 else ConfigErrors(problems)


class ConfigErrors(ConfigError):
    """Several :class:`ConfigError`, one per line; ``path`` is the first one's."""

    def __init__(self, problems: list[ConfigError]):
        ValueError.__init__(self, "\n  ".join(str(p) for p in problems))
        self.path = problems[0].path
        self.problems = list(problems)


def framework_of(run: str) -> str:
    """The framework a run name starts with: ``candle_f32factors`` → ``candle``."""
    if not RUN_NAME.match(run):
        raise ValueError(f"run name {run!r} does not start with a framework ({FRAMEWORKS})")
    return run.split("_", 1)[0]


def unsupported_reason(framework: str, device: str, dtype: str) -> str | None:
    """Why (framework, device, dtype) cannot run, or None when it can."""
    return UNSUPPORTED.get((framework, device, dtype))


def host_device_problem(device: str) -> str | None:
    """Why this host cannot run jobs on ``device``, or None. Cheap: no torch import.

    cuda needs an NVIDIA driver that lists a GPU (``nvidia-smi -L``); metal needs an
    Apple-silicon Mac.
    """
    if device == "cpu":
        return None
    if device == "cuda":
        smi = shutil.which("nvidia-smi")
        if smi is None:
            return "no NVIDIA driver on this host (nvidia-smi not found)"
        try:
            out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired) as e:
            return f"nvidia-smi failed ({e})"
        if out.returncode != 0 or "GPU" not in out.stdout:
            return f"nvidia-smi lists no GPU ({(out.stderr or out.stdout).strip()})"
        return None
    if device == "metal":
        if platform.system() == "Darwin" and platform.machine() == "arm64":
            return None
        host = f"{platform.system()} {platform.machine()}"
        return f"Metal needs an Apple-silicon Mac; this host is {host}"
    return f"unknown device {device!r}"


def model_params(model: Mapping[str, Any]) -> list[tuple[str, tuple[int, ...]]]:
    """Parameters of a model family as (state_dict key, PyTorch shape), in state_dict order.

    ``mlp``: ``fc{i}.weight`` ``[sizes[i], sizes[i-1]]`` and ``fc{i}.bias`` ``[sizes[i]]``.
    ``cnn1d``: ``conv.weight`` ``[channels, in_channels, kernel]``, ``conv.bias``,
    ``fc.weight`` ``[classes, channels·(length − kernel + 1)]``, ``fc.bias``.
    The Rust side declares the same list (``candle-parity``'s ``model::expected_params``) and
    refuses a spec whose list differs.
    """
    family = model["family"]
    if family == "mlp":
        sizes = model["sizes"]
        out = []
        for i in range(1, len(sizes)):
            out.append((f"fc{i}.weight", (sizes[i], sizes[i - 1])))
            out.append((f"fc{i}.bias", (sizes[i],)))
        return out
    if family == "cnn1d":
        c, k = model["channels"], model["kernel"]
        out_len = model["length"] - k + 1
        return [
            ("conv.weight", (c, model["in_channels"], k)),
            ("conv.bias", (c,)),
            ("fc.weight", (model["classes"], c * out_len)),
            ("fc.bias", (model["classes"],)),
        ]
    raise ValueError(f"unknown model family {family!r}")


def model_io(model: Mapping[str, Any]) -> tuple[tuple[int, ...], int]:
    """(input shape of one sample, number of outputs) of a model."""
    if model["family"] == "mlp":
        return (model["sizes"][0],), model["sizes"][-1]
    return (model["in_channels"], model["length"]), model["classes"]


def count_params(model: Mapping[str, Any]) -> int:
    """Total number of scalar parameters."""
    return sum(math.prod(s) for _, s in model_params(model))


def _merge(base: Mapping, override: Mapping) -> dict:
    out = copy.deepcopy(dict(base))
    for k, v in override.items():
        if isinstance(v, Mapping) and isinstance(out.get(k), Mapping):
            out[k] = _merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def canonical_hash(obj: Any) -> str:
    """SHA-256 of the canonical JSON of ``obj`` (sorted keys, no spaces)."""
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True, order=True)
class RunKey:
    """One job and its trace: (experiment, run, dtype, device)."""

    experiment: str
    run: str
    dtype: str
    device: str

    @property
    def framework(self) -> str:
        """``torch``, ``candle`` or ``burn``."""
        return framework_of(self.run)

    @property
    def trace(self) -> str:
        """Path of the trace, relative to the working directory."""
        return TRACE.format(**self.__dict__)

    @property
    def log(self) -> str:
        """Path of the training job's log."""
        return TRAIN_LOG.format(**self.__dict__)

    @property
    def label(self) -> str:
        """Short human label: ``candle f32 cpu``."""
        return f"{self.run} {self.dtype} {self.device}"


@dataclass(frozen=True)
class Comparison:
    """A reference run against a candidate run, for one experiment on one device."""

    experiment: str
    name: str
    device: str
    reference: RunKey
    candidate: RunKey
    expect: str
    tolerance: float
    #: (reference f64, candidate f64) for the split table, or None without float64 runs.
    f64_pair: tuple[RunKey, RunKey] | None

    @property
    def tag(self) -> str:
        """File-name tag: the device for ``main``, ``{device}-{name}`` otherwise."""
        return self.device if self.name == MAIN else f"{self.device}-{self.name}"

    def table(self, kind: str, ext: str = "csv") -> str:
        """``results/tables/{experiment}/{kind}-{tag}.{ext}`` (kind: perstep, split)."""
        return f"results/tables/{self.experiment}/{kind}-{self.tag}.{ext}"

    def figure(self, kind: str) -> str:
        """``results/figures/{experiment}/{kind}-{tag}.png``."""
        return f"results/figures/{self.experiment}/{kind}-{self.tag}.png"

    def log(self, kind: str) -> str:
        """Log of this comparison's ``kind`` job."""
        return COMPARE_LOG.format(kind=kind, experiment=self.experiment, tag=self.tag)

    def result(self, kind: str) -> str:
        """Machine-readable result of one table, gathered by the summary."""
        return f"results/compare/{self.experiment}/{kind}-{self.tag}.json"

    @property
    def traces(self) -> list[str]:
        """Every trace this comparison reads (perstep pair, then the f64 pair if any)."""
        keys = [self.reference, self.candidate, *(self.f64_pair or ())]
        return [k.trace for k in keys]


class Plan:
    """The resolved config: which jobs run and what each compares.

    Construct from a config dict that already passed ``schemas/config.schema.yaml``; raises
    :class:`ConfigError` for what a JSON schema cannot express (a comparison naming a run
    that does not exist, an optimizer a framework lacks, shapes that do not fit).
    """

    def __init__(self, config: Mapping[str, Any]):
        self.config = copy.deepcopy(dict(config))
        self.devices: list[str] = list(self.config["devices"])
        self.dtypes: list[str] = list(self.config["dtypes"])
        self.reference_device: str = self.config.get("reference_device", "cpu")
        self.tolerance: float = float(self.config["tolerance"])
        self.diagnosis: dict = _merge(DIAGNOSIS_DEFAULTS, self.config.get("diagnosis", {}))
        self.experiments: dict[str, dict] = {}
        self._comparisons: dict[tuple, list[Comparison]] = {}
        self.imported_devices: list[str] = list(self.config.get("imported_devices", []))
        #: Problems found so far: the experiments and their runs are each checked in full,
        #: and all their problems raised together (:meth:`ConfigError.every`).
        self._problems: list[ConfigError] = []
        for i, dev in enumerate(self.imported_devices):
            if dev not in self.devices:
                self._problems.append(
                    ConfigError(
                        f"imported_devices[{i}]",
                        f"{dev!r} is not in devices {self.devices}: "
                        "its traces would not be compared",
                    )
                )
        for name, exp in self.config["experiments"].items():
            if exp.get("enabled", True):
                try:
                    self.experiments[name] = self._resolve_experiment(name, exp)
                except ConfigError as e:
                    self._problems.extend(e.problems)
        if self._problems:
            raise ConfigError.every(self._problems)
        for i, name in enumerate(self.config.get("determinism", {}).get("experiments", [])):
            if name not in self.config["experiments"]:
                raise ConfigError(
                    f"determinism.experiments[{i}]", f"{name!r} is not an experiment of this config"
                )
        for i, item in enumerate(self.config.get("framework_summary", [])):
            if item["experiment"] not in self.config["experiments"]:
                raise ConfigError(
                    f"framework_summary[{i}].experiment",
                    f"{item['experiment']!r} is not an experiment of this config",
                )
        #: Fault instances by name (see :meth:`_resolve_fault`), their runs and comparisons
        #: by experiment; none of them is in :meth:`runs` or :meth:`comparisons`.
        self.faults: dict[str, dict] = {}
        #: Instances left out, with the reason: their experiment is not configured (a config
        #: that selects some experiments) or disabled.
        self.faults_left_out: dict[str, str] = {}
        self._fault_runs: dict[str, dict[str, dict]] = {}
        self._fault_comparisons: dict[str, dict[str, dict]] = {}
        faults = self.config.get("faults", {})
        for name, inst in faults.get("instances", {}).items():
            self._resolve_fault(name, inst)
        self.sensitivity: dict | None = None
        if "sensitivity" in faults:
            self.sensitivity = self._resolve_sensitivity(faults["sensitivity"])

    # ----- resolution and checks -------------------------------------------------------

    def _resolve_experiment(self, name: str, exp: Mapping) -> dict:
        where = f"experiments.{name}"
        exp = copy.deepcopy(dict(exp))
        exp.setdefault("runs", {"torch": {}, "candle": {}})
        exp.setdefault("comparisons", {MAIN: {"reference": "torch", "candidate": "candle"}})
        if name in self.config.get("determinism", {}).get("experiments", []):
            # Each run again as <run>_repeat, compared bit for bit (tolerance 0).
            for run in list(exp["runs"]):
                exp["runs"][f"{run}_repeat"] = copy.deepcopy(exp["runs"][run])
                exp["comparisons"][f"determinism_{run}"] = {
                    "reference": run,
                    "candidate": f"{run}_repeat",
                    "tolerance": 0.0,
                }
        exp["record"] = _merge(
            _merge(RECORD_DEFAULTS, self.config.get("record", {})), exp.get("record", {})
        )
        self._check_model(f"{where}.model", exp["model"], exp["loss"])
        runs, problems = {}, []
        for run, override in exp["runs"].items():
            try:
                runs[run] = self._resolve_run(f"{where}.runs.{run}", exp, run, override or {})
            except ConfigError as e:
                problems.extend(e.problems)
        for cname, comp in exp["comparisons"].items():
            for side in ("reference", "candidate"):
                if comp[side] not in exp["runs"]:
                    problems.append(
                        ConfigError(
                            f"{where}.comparisons.{cname}.{side}",
                            f"{comp[side]!r} is not a run of this experiment "
                            f"(runs: {', '.join(exp['runs'])})",
                        )
                    )
            comp.setdefault("expect", "pass")
            comp.setdefault("tolerance", self.tolerance)
        if problems:
            raise ConfigError.every(problems)
        exp["runs"] = runs
        return exp

    def _check_model(self, where: str, model: Mapping, loss: str) -> None:
        if model["family"] == "cnn1d" and model["kernel"] > model["length"]:
            raise ConfigError(
                f"{where}.kernel",
                f"kernel {model['kernel']} is longer than the input length {model['length']}",
            )
        if model["family"] == "cnn1d" and "fc_in" in model:
            (_, (_, fc_in)) = model_params(model)[2]
            if model["fc_in"] != fc_in:
                raise ConfigError(
                    f"{where}.fc_in",
                    f"fc takes {model['fc_in']} inputs but the convolution gives "
                    f"channels·(length − kernel + 1) = {fc_in}",
                )
        if loss == "cross_entropy" and model_io(model)[1] < 2:
            raise ConfigError(where, "cross-entropy needs at least two outputs (classes)")

    def _resolve_run(self, where: str, exp: Mapping, run: str, override: Mapping) -> dict:
        framework = framework_of(run)
        optimizer = _merge(exp["optimizer"], override.get("optimizer", {}))
        settings: dict[str, Any] = {
            "framework": framework,
            "model": copy.deepcopy(exp["model"]),
            "loss": exp["loss"],
            "data": copy.deepcopy(exp["data"]),
            "steps": exp["steps"],
            "record": _merge(exp["record"], override.get("record", {})),
            "optimizer": optimizer,
        }
        name = optimizer["name"]
        if name in ("adam", "adamw"):
            for k in ("betas", "eps", "weight_decay"):
                if k not in optimizer:
                    raise ConfigError(f"{where}.optimizer.{k}", f"{name} needs an explicit {k}")
        if framework == "torch":
            settings["optimizer_path"] = override.get(
                "optimizer_path",
                self.config.get("torch", {}).get("optimizer_path", "single_tensor"),
            )
            if "implementation" in optimizer or "bias_correction" in optimizer:
                raise ConfigError(
                    f"{where}.optimizer",
                    "implementation and bias_correction are candle-side settings",
                )
        elif framework == "burn":
            self._resolve_burn_run(where, exp, settings, override)
        else:
            if name == "adam":
                raise ConfigError(
                    f"{where}.optimizer.name",
                    "candle-nn 0.11.0 has no Adam; use adamw with weight_decay 0 "
                    "(PyTorch's Adam equals AdamW(weight_decay=0) bit for bit)",
                )
            if name == "sgd" and (optimizer.get("momentum", 0) or optimizer.get("weight_decay", 0)):
                raise ConfigError(
                    f"{where}.optimizer",
                    "candle-nn 0.11.0's SGD has no momentum and no weight decay",
                )
            if name == "adamw":
                optimizer.setdefault("implementation", "candle")
                optimizer.setdefault("bias_correction", "f64")
                if (
                    optimizer["bias_correction"] == "f32"
                    and optimizer["implementation"] != "manual"
                ):
                    raise ConfigError(
                        f"{where}.optimizer.bias_correction",
                        "float32 bias-correction factors need implementation: manual",
                    )
            if exp["model"]["family"] == "cnn1d":
                settings["model"]["conv_impl"] = override.get("conv_impl", "conv2d")
            elif "conv_impl" in override:
                raise ConfigError(f"{where}.conv_impl", "only cnn1d models have a convolution")
        if "fault" in override:
            settings["fault"] = self._check_fault(
                f"{where}.fault", exp, settings, override["fault"]
            )
        names = [n for n, _ in model_params(exp["model"])]
        tensors = settings["record"].get("tensors")
        for t in tensors or ():
            if t not in names:
                raise ConfigError(
                    f"{where}.record.tensors", f"{t!r} is not a parameter ({', '.join(names)})"
                )
        manual = name == "adamw" and optimizer.get("implementation") == "manual"
        if settings["record"].get("moments") and framework == "candle" and not manual:
            raise ConfigError(
                f"{where}.record.moments",
                "candle-nn keeps AdamW's moments private; use implementation: manual",
            )
        return settings

    def _resolve_burn_run(self, where: str, exp: Mapping, settings: dict, override: Mapping):
        """burn's side of :meth:`_resolve_run`: burn-optim 0.22's own SGD, Adam (L2 weight
        decay, as torch.optim.Adam) and AdamW (decoupled), all with every hyperparameter
        explicit; both Adams compute their bias-correction factors in float32, which the
        resolved settings say (``implementation: burn``, ``bias_correction: f32``). The
        convolution is burn's own conv1d. Raises :class:`ConfigError` for candle-side
        settings, SGD momentum or weight decay (the run spec carries neither) and moments
        (burn keeps them in its optimizer record)."""
        optimizer = settings["optimizer"]
        if "implementation" in optimizer or "bias_correction" in optimizer:
            raise ConfigError(
                f"{where}.optimizer",
                "implementation and bias_correction are candle-side settings; burn runs its "
                "own optimizers (bias correction in float32)",
            )
        if optimizer["name"] == "sgd" and (
            optimizer.get("momentum", 0) or optimizer.get("weight_decay", 0)
        ):
            raise ConfigError(
                f"{where}.optimizer",
                "burn runs plain SGD here: the run spec carries no SGD momentum or weight decay",
            )
        if optimizer["name"] in ("adam", "adamw"):
            optimizer.update(implementation="burn", bias_correction="f32")
        if "conv_impl" in override:
            raise ConfigError(
                f"{where}.conv_impl", "conv_impl is a candle-side setting; burn calls its conv1d"
            )
        if exp["model"]["family"] == "cnn1d":
            settings["model"]["conv_impl"] = "conv1d"
        if settings["record"].get("moments"):
            raise ConfigError(
                f"{where}.record.moments",
                "burn keeps its optimizer moments in its record; burn-parity does not record them",
            )

    def _check_fault(self, where: str, exp: Mapping, settings: Mapping, fault: Mapping) -> dict:
        """A run's ``fault`` setting, checked against what the run can have (see
        :data:`FAULTS`); raises :class:`ConfigError`. A ``skip_update`` step beyond the
        run's steps is allowed and skips nothing, so that a config shortened for a test
        stays valid (the comparison then shows that the fault never fired)."""
        framework, kind = settings["framework"], fault["kind"]
        if kind not in FAULTS.get(framework, {}):
            sides = [f for f, kinds in FAULTS.items() if kind in kinds]
            raise ConfigError(
                f"{where}.kind",
                f"{kind!r} is a fault of the {'/'.join(sides)} side, not of {framework}"
                + (
                    " (candle 0.11.0 already takes relu'(0) = 1)"
                    if kind == "relu_grad_at_zero"
                    else ""
                ),
            )
        opt = settings["optimizer"]
        if kind in ADAMW_FAULTS and not (
            opt["name"] == "adamw" and opt.get("implementation") == "manual"
        ):
            raise ConfigError(
                f"{where}.kind",
                f"{kind} is a fault in the AdamW update; it needs optimizer "
                "{name: adamw, implementation: manual}",
            )
        if kind == "mse_sum" and exp["loss"] != "mse":
            raise ConfigError(f"{where}.kind", "mse_sum needs loss mse")
        if kind == "transposed_weight" and not (
            exp["model"]["family"] == "mlp"
            and any(a == b for a, b in itertools.pairwise(exp["model"]["sizes"]))
        ):
            raise ConfigError(
                f"{where}.kind",
                "transposed_weight needs an MLP with a square weight (two equal consecutive sizes)",
            )
        if kind == "relu_grad_at_zero" and exp["model"].get("activation") != "relu":
            raise ConfigError(f"{where}.kind", "relu_grad_at_zero needs a ReLU model")
        return dict(fault)

    def _resolve_fault(self, name: str, inst: Mapping) -> None:
        """One fault instance (config ``faults.instances.<name>``): the faulty run
        ``<run>_fault_<name>`` (the base run's override with the instance's merged over it)
        and the comparison ``fault_<name>`` of the clean run ``against`` (default: the other
        side of the experiment's ``main`` comparison) with it, expected to fail. An instance
        whose experiment is not configured or disabled is left out
        (:attr:`faults_left_out`); one naming a run the experiment lacks is an error."""
        where = f"faults.instances.{name}"
        e = inst["experiment"]
        if e not in self.config["experiments"]:
            self.faults_left_out[name] = f"experiment {e} is not in this config"
            return
        if e not in self.experiments:
            self.faults_left_out[name] = f"experiment {e} is disabled"
            return
        exp = self.experiments[e]
        ((base, override),) = inst["run"].items()
        raw_runs = self.config["experiments"][e].get("runs") or {"torch": {}, "candle": {}}
        if base not in raw_runs:
            raise ConfigError(
                f"{where}.run", f"{base!r} is not a run of {e} (runs: {', '.join(raw_runs)})"
            )
        run = f"{base}_fault_{name}"
        comparison = f"fault_{name}"
        if run in exp["runs"] or comparison in exp["comparisons"]:
            raise ConfigError(where, f"{e} already has a run {run} or a comparison {comparison}")
        against = inst.get("against")
        if against is None:
            main = exp["comparisons"].get(MAIN, {})
            other = {
                main.get("candidate"): main.get("reference"),
                main.get("reference"): main.get("candidate"),
            }
            against = other.get(base)
            if against is None:
                raise ConfigError(
                    f"{where}.against",
                    f"{base!r} is not a side of {e}'s main comparison; name the clean run to "
                    "compare with",
                )
        if against not in exp["runs"]:
            raise ConfigError(
                f"{where}.against",
                f"{against!r} is not a run of {e} (runs: {', '.join(exp['runs'])})",
            )
        merged = _merge(raw_runs[base] or {}, override or {})
        settings = self._resolve_run(f"{where}.run.{base}", exp, run, merged)
        self._fault_runs.setdefault(e, {})[run] = settings
        self._fault_comparisons.setdefault(e, {})[comparison] = {
            "reference": against,
            "candidate": run,
            "expect": "fail",
            "tolerance": self.tolerance,
        }
        self.faults[name] = {
            "name": name,
            "experiment": e,
            "description": inst["description"],
            "note": inst.get("note", ""),
            "side": framework_of(base),
            "base": base,
            "run": run,
            "against": against,
            "comparison": comparison,
            "kind": settings.get("fault", {}).get("kind", ""),
        }

    def _resolve_sensitivity(self, sens: Mapping) -> dict | None:
        """Config ``faults.sensitivity``: which run's learning rate is perturbed, against
        which clean run, over which decades of δ, with how many bisections (see
        ``detection.sensitivity_job``). None when its experiment is not configured or
        disabled."""
        where = "faults.sensitivity"
        e = sens["experiment"]
        if e not in self.experiments:
            return None
        runs = self.experiments[e]["runs"]
        against = sens.get("against", "torch")
        for key, run in (("run", sens["run"]), ("against", against)):
            if run not in runs:
                raise ConfigError(
                    f"{where}.{key}", f"{run!r} is not a run of {e} (runs: {', '.join(runs)})"
                )
        lo, hi = sens["log10_range"]
        if lo >= hi:
            raise ConfigError(f"{where}.log10_range", f"[{lo}, {hi}] is empty")
        return {
            "experiment": e,
            "run": sens["run"],
            "against": against,
            "log10_range": [lo, hi],
            "bisections": sens.get("bisections", 6),
            "lr": runs[sens["run"]]["optimizer"]["lr"],
            "tolerance": self.tolerance,
        }

    def perturbed_lr(self, delta: float) -> tuple[Plan, RunKey]:
        """The sensitivity run for relative learning-rate error ``delta``: a plan of the
        sensitivity experiment alone with run ``<run>_sensitivity``, the sensitivity run's
        settings with lr·(1 + δ), and its f32 CPU key. Raises ``ValueError`` without a
        sensitivity setting."""
        if self.sensitivity is None:
            raise ValueError("this config has no faults.sensitivity")
        s = self.sensitivity
        e, run = s["experiment"], s["run"]
        config = copy.deepcopy(self.config)
        exp = config["experiments"][e]
        raw_runs = exp.get("runs") or {"torch": {}, "candle": {}}
        name = f"{run}_sensitivity"
        raw_runs[name] = _merge(raw_runs[run] or {}, {"optimizer": {"lr": s["lr"] * (1 + delta)}})
        exp["runs"] = raw_runs
        exp["comparisons"] = {MAIN: {"reference": s["against"], "candidate": name}}
        config["experiments"] = {e: exp}
        for key in ("framework_summary", "faults"):
            config.pop(key, None)
        config["determinism"] = {"experiments": []}
        config["devices"] = ["cpu"]
        return Plan(config), RunKey(e, name, "f32", "cpu")

    # ----- queries -----------------------------------------------------------------------

    def run_settings(self, experiment: str, run: str) -> dict:
        """Resolved settings of a run (a fault instance's run too): framework, model, loss,
        data, steps, record, optimizer, framework options and ``fault`` when it has one.
        Raises ``KeyError`` for an unknown run."""
        runs = self.experiments[experiment]["runs"]
        if run in runs:
            return copy.deepcopy(runs[run])
        return copy.deepcopy(self._fault_runs.get(experiment, {})[run])

    def config_hash(self, experiment: str, run: str) -> str:
        """Hash of everything that defines the computation of a run (not dtype/device)."""
        return canonical_hash(self.run_settings(experiment, run))

    def fixture_settings(self, experiment: str) -> dict:
        """What the fixture depends on: model, loss and data."""
        exp = self.experiments[experiment]
        return {"model": exp["model"], "loss": exp["loss"], "data": exp["data"]}

    def fixture(self, experiment: str) -> str:
        """Path of an experiment's fixture."""
        return f"results/fixtures/{experiment}.safetensors"

    def supported(self, key: RunKey) -> bool:
        """Whether the validity matrix allows this run."""
        return unsupported_reason(key.framework, key.device, key.dtype) is None

    def runs(self) -> list[RunKey]:
        """Every run job: each run × dtype × device of the config, where supported, plus
        the reference-device runs that comparisons need."""
        keys = {
            RunKey(e, r, dt, dev)
            for e, exp in self.experiments.items()
            for r in exp["runs"]
            for dt in self.dtypes
            for dev in self.devices
        }
        for c in self.comparisons():
            keys.update([c.reference, c.candidate, *(c.f64_pair or ())])
        return sorted(k for k in keys if self.supported(k))

    def _pair_key(self, experiment: str, run: str, dtype: str, device: str) -> RunKey:
        key = RunKey(experiment, run, dtype, device)
        if not self.supported(key):
            # A float64 run on a device without float64 is taken from the CPU (SPEC §4).
            key = RunKey(experiment, run, dtype, "cpu")
        return key

    def unsupported_cells(self) -> list[tuple[RunKey, str]]:
        """Runs of the configured devices and dtypes that the validity matrix excludes,
        with the reason; the summary lists them with verdict ``unsupported``."""
        cells = []
        for e, exp in self.experiments.items():
            for r in exp["runs"]:
                for dt in self.dtypes:
                    for dev in self.devices:
                        key = RunKey(e, r, dt, dev)
                        reason = unsupported_reason(key.framework, dev, dt)
                        if reason:
                            cells.append((key, reason))
        return cells

    def comparisons(self, devices: Sequence[str] | None = None) -> list[Comparison]:
        """Every comparison of the enabled experiments on ``devices`` (default: the
        configured ones)."""
        devices = tuple(self.devices if devices is None else devices)
        if devices not in self._comparisons:
            self._comparisons[devices] = self._build_comparisons(
                devices, {e: exp["comparisons"] for e, exp in self.experiments.items()}
            )
        return list(self._comparisons[devices])

    def fault_comparisons(self, devices: Sequence[str] | None = None) -> list[Comparison]:
        """The comparison of every fault instance (``fault_<name>``, expected to fail) on
        ``devices`` (default: the configured ones), grouped by experiment."""
        devices = tuple(self.devices if devices is None else devices)
        key = ("faults", *devices)
        if key not in self._comparisons:
            self._comparisons[key] = self._build_comparisons(devices, self._fault_comparisons)
        return list(self._comparisons[key])

    def correct_pairs(self, devices: Sequence[str] | None = None) -> list[Comparison]:
        """Comparisons of the default target expected to pass: each one a fault criterion
        flags is a false alarm."""
        return [c for c in self.comparisons(devices) if c.expect == "pass"]

    def for_devices(self, devices: Sequence[str]) -> Plan:
        """The same plan restricted to ``devices`` (a per-device target)."""
        other = copy.copy(self)
        other.devices = list(devices)
        other._comparisons = {}
        return other

    def local_devices(self) -> list[str]:
        """Devices whose runs this host makes (every device but the imported ones)."""
        return [d for d in DEVICES if d not in self.imported_devices]

    def framework_summary_rows(self) -> list[dict]:
        """The study's "burn vs PyTorch | candle vs PyTorch" table, as configured
        (``framework_summary``): per row the experiment, its label and, for each framework,
        the comparison of that framework's run against the ``torch`` run on the CPU (None
        when no such run is configured)."""
        rows = []
        for item in self.config.get("framework_summary", []):
            e = item["experiment"]
            if e not in self.experiments:
                continue
            cells = {}
            for fw in FRAMEWORKS:
                if fw == "torch":
                    continue
                cells[fw] = next(
                    (
                        c
                        for c in self.comparisons()
                        if c.experiment == e
                        and c.device == "cpu"
                        and c.reference.run == "torch"
                        and c.candidate.run == fw
                    ),
                    None,
                )
            rows.append({"experiment": e, "label": item["label"], "comparisons": cells})
        return rows

    def framework_summary_inputs(self) -> list[str]:
        """Result files the framework table reads."""
        out = []
        for item in self.framework_summary_rows():
            for comp in item["comparisons"].values():
                if comp is not None:
                    out.append(comp.result("perstep"))
                    if comp.f64_pair is not None:
                        out.append(comp.result("split"))
        return out

    def _build_comparisons(
        self, devices: Sequence[str], by_experiment: Mapping[str, Mapping[str, dict]]
    ) -> list[Comparison]:
        out = []
        primary = "f32" if "f32" in self.dtypes else self.dtypes[0]
        for e, comparisons in by_experiment.items():
            for name, comp in comparisons.items():
                for dev in devices:
                    ref_dev = dev if self.reference_device == "same" else self.reference_device
                    ref = self._pair_key(e, comp["reference"], primary, ref_dev)
                    cand = self._pair_key(e, comp["candidate"], primary, dev)
                    f64 = None
                    if primary == "f32" and "f64" in self.dtypes:
                        f64 = (
                            self._pair_key(e, comp["reference"], "f64", ref_dev),
                            self._pair_key(e, comp["candidate"], "f64", dev),
                        )
                    out.append(
                        Comparison(e, name, dev, ref, cand, comp["expect"], comp["tolerance"], f64)
                    )
        return out

    def comparison(self, experiment: str, tag: str) -> Comparison:
        """The comparison with this file-name tag, on any device (per-device targets may
        ask for devices the config does not list), fault instances' too. Raises ``KeyError``
        if none."""
        for c in self.comparisons(DEVICES) + self.fault_comparisons(DEVICES):
            if c.experiment == experiment and c.tag == tag:
                return c
        raise KeyError(f"no comparison {tag!r} in experiment {experiment!r}")

    def trace_expectation(self, key: RunKey) -> dict:
        """What a trace of ``key`` must carry (see ``schema.TraceReader``)."""
        s = self.run_settings(key.experiment, key.run)
        recorded = s["record"].get("tensors") or [n for n, _ in model_params(s["model"])]
        shapes = dict(model_params(s["model"]))
        return {
            "experiment": key.experiment,
            "run": key.run,
            "framework": key.framework,
            "dtype": key.dtype,
            "device": key.device,
            "steps": s["steps"],
            "record_every": s["record"]["every"],
            "config_hash": self.config_hash(key.experiment, key.run),
            "params": {n: shapes[n] for n in recorded},
        }

    def runner_spec(self, key: RunKey, fixture: str) -> dict:
        """The JSON run spec the Rust runner reads (``parity_common::spec::RunSpec``).

        Every field is explicit; the Rust side refuses unknown fields.
        """
        s = self.run_settings(key.experiment, key.run)
        opt = s["optimizer"]
        if opt["name"] == "sgd":
            optimizer = {"name": "sgd", "lr": opt["lr"]}
        elif opt["name"] == "adam":  # burn only; Plan refuses Adam for candle
            optimizer = {
                "name": "adam",
                "lr": opt["lr"],
                "betas": list(opt["betas"]),
                "eps": opt["eps"],
                "weight_decay": opt["weight_decay"],
            }
        else:
            optimizer = {
                "name": "adamw",
                "lr": opt["lr"],
                "betas": list(opt["betas"]),
                "eps": opt["eps"],
                "weight_decay": opt["weight_decay"],
                "implementation": opt["implementation"],
                "bias_correction": opt["bias_correction"],
            }
        model = dict(s["model"])
        model.pop("fc_in", None)
        return {
            "experiment": key.experiment,
            "run": key.run,
            "fixture": fixture,
            "dtype": key.dtype,
            "device": key.device,
            "steps": s["steps"],
            "model": model,
            "loss": s["loss"],
            "optimizer": optimizer,
            "record": {
                "every": s["record"]["every"],
                "tensors": s["record"].get("tensors"),
                "grads": bool(s["record"].get("grads", False)),
                "moments": bool(s["record"].get("moments", False)),
            },
            "params": [{"name": n, "shape": list(sh)} for n, sh in model_params(s["model"])],
            "fault": dict(s.get("fault", NO_FAULT)),
        }
