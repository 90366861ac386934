"""What a config or a probe file may ask for: every number finite, and every job's size
estimated, and refused beyond the configured limits, before the DAG is built (just over 500
lines: every limit in one place, as config.yaml lists them).

* :func:`non_finite` walks a parsed document for NaN and ±Inf (YAML's ``.nan``, ``.inf``),
  which a JSON schema cannot refuse (``nan > 0`` is false, so ``exclusiveMinimum`` lets it
  through), and names each one's key path;
* :func:`check_plan` estimates, for every experiment and run of a resolved config, the
  elements of its largest tensor (parameters, the fixture's inputs, one batch's
  activations), its trace's size (recorded steps × bytes per step), every trace together,
  its steps and its work (multiply-adds), and refuses what exceeds the limits;
* :func:`probe_tensor_sizes` infers, from a probe file as written (before anything is
  allocated), the shape of every input and every op's output, so that ``ones: [100000,
  100000]`` or a one-element input broadcast to ``[100000, 100000]`` is refused by name
  instead of exhausting memory while the DAG is built or in a Rust job.

The limits are config keys (``limits.*``, :data:`DEFAULTS`, docs/usage.md); the YAML
reading limits are applied by :mod:`parity.core.yamlfile`. Pure Python: cheap to import.

Over 400 lines on purpose: one size model per op and per model family, kept beside the
limits they are checked against so that an op or a family added elsewhere has one place to
add its estimate (``tests/test_limits.py`` checks every probe op has one).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from parity.core.config import ConfigError
from parity.core.models import model_io, model_params
from parity.core.watchdog import IDLE_SECONDS
from parity.core.yamlfile import MAX_BYTES, MAX_NODES

#: Every limit and its default (config ``limits``; docs/usage.md explains each).
DEFAULTS: dict[str, int | float] = {
    # Steps of one experiment: each job lists every recorded step.
    "max_steps": 1_000_000,
    # Elements of any one tensor of a training run: a parameter, the fixture's inputs,
    # one batch's activations of the widest layer.
    "max_tensor_elements": 100_000_000,
    # Tensor data of one trace (recorded steps × bytes per step, in the widest dtype run).
    "max_trace_bytes": 8 << 30,
    # Tensor data of every trace of the run together.
    "max_total_trace_bytes": 64 << 30,
    # Multiply-adds of one training run, about 3 × steps × batch × the model's
    # multiply-adds per sample (forward and backward); 1e13 is hours on one CPU core.
    "max_run_macs": 1.0e13,
    # Training runs of the learning-rate sensitivity search (decades scanned, bisections).
    "max_sensitivity_runs": 64,
    # Elements of any tensor of a probe: an input, an op's output, a gradient.
    "max_probe_tensor_elements": 1_000_000,
    # A YAML file the workflow reads (config files, probe files), before it is parsed.
    "max_yaml_bytes": MAX_BYTES,
    # Values of a parsed YAML document with aliases expanded.
    "max_yaml_nodes": MAX_NODES,
    # Seconds a call into the user's own code (a model file's import and model card, a
    # port's inspect, training or replay) may go without progress before it is stopped.
    "user_code_idle_seconds": IDLE_SECONDS,
}


def settings(config: Mapping[str, Any] | None) -> dict[str, int | float]:
    """The limits of ``config``: :data:`DEFAULTS` with ``config["limits"]`` over them. A
    value that is not a positive number is left to the schema to refuse (the default holds
    until then, so that reading the config files stays bounded)."""
    out = dict(DEFAULTS)
    given = (config or {}).get("limits")
    if isinstance(given, Mapping):
        for k, v in given.items():
            if k in out and isinstance(v, int | float) and not isinstance(v, bool) and v > 0:
                out[k] = v
    return out


def key_path(path: Sequence[Any]) -> str:
    """``experiments.a3_sgd.optimizer.lr`` / ``inputs.x.values[3]`` from path parts."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def non_finite(doc: Any) -> Iterator[tuple[str, float]]:
    """Yield (key path, value) of every NaN or ±Inf in a parsed document, in document order.

    Walks without recursion; a document must have passed ``yamlfile.check_nodes`` (which
    bounds the walk, aliases included)."""
    stack: list[tuple[tuple, Any]] = [((), doc)]
    while stack:
        path, node = stack.pop()
        if isinstance(node, float) and not math.isfinite(node):
            yield key_path(path), node
        elif isinstance(node, Mapping):
            stack.extend(reversed([((*path, k), v) for k, v in node.items()]))
        elif isinstance(node, list | tuple):
            stack.extend(reversed([((*path, i), v) for i, v in enumerate(node)]))


#: Keys of a probe file whose values are tensor values (floats), not sizes or indices.
VALUE_KEYS = ("values", "exact", "known_bug", "arange")


def large_integers(doc: Any, limit: int = 2**53) -> Iterator[tuple[str, int]]:
    """(key path, value) of every integer of a probe document, outside its tensor values
    (:data:`VALUE_KEYS`), whose magnitude exceeds ``limit``: a shape, a dimension or an
    op argument the runners (64-bit sizes, JSON numbers) cannot take. A dimension of 0
    makes a shape's product 0, so the size estimate alone would let ``[0, 10**30]`` by."""
    stack: list[tuple[tuple, Any]] = [((), doc)]
    while stack:
        path, node = stack.pop()
        if isinstance(node, int) and not isinstance(node, bool) and abs(node) > limit:
            yield key_path(path), node
        elif isinstance(node, Mapping):
            stack.extend(
                reversed([((*path, k), v) for k, v in node.items() if k not in VALUE_KEYS])
            )
        elif isinstance(node, list | tuple):
            stack.extend(reversed([((*path, i), v) for i, v in enumerate(node)]))


def yaml_text(value: float) -> str:
    """How YAML writes a non-finite value: ``.nan``, ``.inf``, ``-.inf``."""
    return ".nan" if math.isnan(value) else (".inf" if value > 0 else "-.inf")


def check_config_numbers(config: Mapping[str, Any]) -> None:
    """Refuse every NaN and ±Inf of a config (files and ``--config`` values merged), each
    with its key path. Raises :class:`ConfigError` (every one at once)."""
    problems = [
        ConfigError(where, f"{yaml_text(v)} is not a finite number; every number must be")
        for where, v in non_finite(config)
    ]
    if problems:
        raise ConfigError.every(problems)


# ----- training runs -----------------------------------------------------------------------


def _bytes(n: float) -> str:
    """``171 kB``, ``8.59 GB``: a byte count for a message."""
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{int(n)} bytes"


def recorded_rows(steps: int, every: int) -> int:
    """How many rows ``schema.recorded_steps(steps, every)`` lists, without listing them:
    step 0, every ``every``-th step, and the last step."""
    return 1 + steps // every + (1 if steps % every else 0)


def macs_per_sample(model: Mapping[str, Any]) -> int:
    """Multiply-adds of one sample's forward pass (weights × positions they apply to); for
    an own model every parameter applied once per position (an estimate: a model whose
    weights apply more often, a convolution, does more)."""
    if model["family"] == "own":
        positions = model["io"]["input"].get("shape", [1])[0] if _tokens(model) else 1
        return positions * sum(math.prod(s) for _, s in model_params(model))
    if model["family"] == "mlp":
        sizes = model["sizes"]
        return sum(a * b for a, b in itertools.pairwise(sizes))
    if model["family"] == "transformer":
        d, t = model["d_model"], model["seq_len"]
        # per position and block: q, k, v, out (4d²), the MLP (8d²), scores and p·v (2Td)
        per_block = 12 * d * d + 2 * t * d
        return t * (model["blocks"] * per_block + model["vocab"] * d)
    out_len = model["length"] - model["kernel"] + 1
    conv = model["channels"] * model["in_channels"] * model["kernel"] * out_len
    return conv + model["channels"] * out_len * model["classes"]


def _tokens(model: Mapping[str, Any]) -> bool:
    return model["io"]["input"]["kind"] == "tokens"


def largest_activation(model: Mapping[str, Any]) -> int:
    """Elements of one sample's widest layer output (the forward pass keeps it); for an own
    model its output, or its largest parameter's leading dimension per position."""
    if model["family"] == "own":
        positions = model["io"]["input"].get("shape", [1])[0] if _tokens(model) else 1
        widest = max((s[0] for _, s in model_params(model) if s), default=1)
        return positions * max(widest, model_io(model)[1] // max(1, positions))
    if model["family"] == "mlp":
        return max(model["sizes"])
    if model["family"] == "transformer":
        t = model["seq_len"]
        return t * max(model["heads"] * t, 4 * model["d_model"], model["vocab"])
    return model["channels"] * max(1, model["length"] - model["kernel"] + 1)


def run_estimate(settings: Mapping[str, Any], itemsize: int) -> dict[str, int | float]:
    """Estimated size of one training run with resolved ``settings``
    (``resolve.resolve_run``): ``rows`` and ``trace_bytes`` of its trace in a dtype of
    ``itemsize`` bytes, and ``macs``, its multiply-adds."""
    model, record = settings["model"], settings["record"]
    shapes = dict(model_params(model))
    recorded = record.get("tensors") or list(shapes)
    per_param = 1 + bool(record.get("grads")) + 2 * bool(record.get("moments"))
    row = itemsize * per_param * sum(math.prod(shapes[n]) for n in recorded if n in shapes)
    rows = recorded_rows(settings["steps"], record["every"])
    batch = settings["data"]["batch_size"]
    return {
        "rows": rows,
        "trace_bytes": rows * row,
        "macs": 3 * settings["steps"] * batch * macs_per_sample(model),
    }


def check_plan(plan, limits: Mapping[str, int | float]) -> None:
    """Estimate every job of ``plan`` (a :class:`parity.plan.plan.Plan`) and refuse what exceeds
    ``limits`` (:func:`settings`), naming the key. Raises :class:`ConfigError` listing every
    problem. Nothing is allocated: the estimates are arithmetic on the config."""
    problems: list[ConfigError] = []

    def over(where: str, what: str, value: float, key: str, unit=str) -> None:
        if value > limits[key]:
            problems.append(
                ConfigError(
                    where, f"{what} {unit(value)}, more than limits.{key} ({unit(limits[key])})"
                )
            )

    itemsize = 8 if "f64" in plan.dtypes else 4
    for e, exp in plan.experiments.items():
        where = f"experiments.{e}"
        over(f"{where}.steps", "steps:", exp["steps"], "max_steps")
        for name, shape in model_params(exp["model"]):
            over(f"{where}.model", f"parameter {name} has", math.prod(shape), "max_tensor_elements")
        data = exp["data"]
        in_shape, outputs = model_io(exp["model"])
        lead = data["batches"] * data["batch_size"]
        over(
            f"{where}.data",
            "the fixture's inputs x have",
            lead * math.prod(in_shape),
            "max_tensor_elements",
        )
        over(f"{where}.data", "the fixture's targets y have", lead * outputs, "max_tensor_elements")
        over(
            f"{where}.model",
            "one batch's widest activation has",
            data["batch_size"] * largest_activation(exp["model"]),
            "max_tensor_elements",
        )
    runs = [(e, r) for e, exp in plan.experiments.items() for r in exp["runs"]]
    runs += [(f["experiment"], f["run"]) for f in plan.faults.values()]
    for e, r in runs:
        if e not in plan.experiments:
            continue
        est = run_estimate(plan.run_settings(e, r), itemsize)
        where = f"experiments.{e}.runs.{r}"
        over(
            where,
            f"its trace ({est['rows']} recorded steps) would hold",
            est["trace_bytes"],
            "max_trace_bytes",
            _bytes,
        )
        over(
            where,
            "a run takes about",
            est["macs"],
            "max_run_macs",
            lambda v: f"{v:.3g} multiply-adds",
        )
    total = sum(
        run_estimate(plan.run_settings(k.experiment, k.run), 8 if k.dtype == "f64" else 4)[
            "trace_bytes"
        ]
        for k in plan.runs()
    )
    over("experiments", "every trace together would hold", total, "max_total_trace_bytes", _bytes)
    if plan.sensitivity is not None:
        lo, hi = plan.sensitivity["log10_range"]
        n = (hi - lo + 1) + plan.sensitivity["bisections"] + 1
        over(
            "faults.sensitivity.log10_range",
            "the search would make",
            n,
            "max_sensitivity_runs",
            lambda v: f"{v} runs",
        )
    if problems:
        raise ConfigError.every(problems)
