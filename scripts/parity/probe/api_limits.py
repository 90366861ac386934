"""The documented API limits of the frameworks: the ONE table of the valid probe steps
that a framework refuses by design, each with the condition on the step's arguments and
input shapes, the reason and the place in the framework's source that documents or
checks it up front.

The rule it encodes: a limitation a framework documents or checks before it computes
anything (candle's backward of ``avg_pool2d`` bails out when the kernel and the stride
differ; burn's ``gather`` panics unless the index has the input's shape outside ``dim``)
is ``unsupported`` with its reason, never a finding. A crash, a panic or a shape error deep
inside a computation on valid input stays a ``framework-error`` finding, which ``check``
refuses until it is recorded as a ``known_bug`` (docs/probes.md).

The Rust runners never see a case a limit covers: :func:`case_limits` names them,
``parity.probe.rust.run_batch`` leaves them out of the batch and gives each of their
quantities the outcome ``unsupported`` with :meth:`Limit.message`. The probes target and
the layout fuzzer run candle and burn through that function, so both follow the table.
docs/probe-reference.md lists the table (``scripts/dev/probe_reference.py`` renders it
with :func:`rows`). The limits of an op's whole API (an op or an argument a framework
lacks) stay the ``x-support`` entries of ``schemas/probe.schema.yaml``, which the runners
implement. Pure Python.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from parity.compare.verdicts import UNSUPPORTED
from parity.probe.format import ERROR, Probe
from parity.probe.results import Outcome
from parity.probe.shapes import table as probe_shapes

CANDLE_BACKPROP = "https://docs.rs/crate/candle-core/0.11.0/source/src/backprop.rs"
BURN_TENSOR = "https://docs.rs/crate/burn-tensor/0.22.1/source/src/tensor/api"


@dataclass(frozen=True)
class Step:
    """What a limit's condition sees of one step: its normalized arguments, its input
    shapes, its output shape, and whether a backward pass goes through it (the case has a
    loss and an input of the step depends on an input with ``requires_grad``)."""

    args: Mapping[str, Any]
    shapes: Sequence[Sequence[int]]
    out: Sequence[int]
    backward: bool


@dataclass(frozen=True)
class Limit:
    """One row of the table: ``framework`` refuses ``op`` when ``applies`` holds."""

    op: str
    framework: str
    #: The condition, as the reference shows it.
    condition: str
    reason: str
    source: str
    applies: Callable[[Step], bool]

    def message(self) -> str:
        """The ``unsupported`` outcome's message: the reason and where it is documented."""
        return f"{self.reason} ({self.condition}; documented in {self.source})"


def _pool_backward(step: Step) -> bool:
    return step.backward and list(step.args["kernel"]) != list(step.args["stride"])


def _upsample1d_backward(step: Step) -> bool:
    return step.backward and step.out[-1] % step.shapes[0][-1] != 0


def _upsample2d_backward(step: Step) -> bool:
    (h, w), (th, tw) = step.shapes[0][-2:], step.out[-2:]
    return step.backward and (th % h != 0 or tw % w != 0 or th // h != tw // w)


def _gather_index_shape(step: Step) -> bool:
    x, idx = step.shapes
    d = step.args["dim"] % len(x)
    return any(n != m for i, (n, m) in enumerate(zip(x, idx, strict=True)) if i != d)


def _squeeze_not_one(step: Step) -> bool:
    x = step.shapes[0]
    return bool(x) and x[step.args["dim"] % len(x)] != 1


def _scatter_src_shape(step: Step) -> bool:
    x, _, src = step.shapes
    d = step.args["dim"] % len(x)
    return any(n != m for i, (n, m) in enumerate(zip(x, src, strict=True)) if i != d)


CANDLE_TENSOR = "https://docs.rs/crate/candle-core/0.11.0/source/src/tensor.rs"
_SCATTER_CONDITION = "index and src shape ≠ x's shape outside dim"


def _scatter_limits(op: str) -> tuple[Limit, Limit]:
    return (
        Limit(
            op,
            "candle",
            _SCATTER_CONDITION,
            f"candle's Tensor::{op} needs src to have x's shape in every dimension but dim "
            '(scatter_checks refuses it up front: "shape mismatch in scatter (self, src)")',
            f"{CANDLE_TENSOR}#1610",
            _scatter_src_shape,
        ),
        Limit(
            op,
            "burn",
            _SCATTER_CONDITION,
            "burn's Tensor::scatter needs the index to have the input's shape in every "
            "dimension but dim (its documented note; TensorCheck::scatter panics otherwise)",
            f"{BURN_TENSOR}/base.rs#1946",
            _scatter_src_shape,
        ),
    )


LIMITS: tuple[Limit, ...] = (
    Limit(
        "avg_pool2d",
        "candle",
        "backward pass with stride ≠ kernel",
        "candle's avg_pool2d has a backward only for stride = kernel "
        '("backward not supported for avgpool2d if ksize != stride")',
        f"{CANDLE_BACKPROP}#348",
        _pool_backward,
    ),
    Limit(
        "max_pool2d",
        "candle",
        "backward pass with stride ≠ kernel",
        "candle's max_pool2d has a backward only for stride = kernel "
        '("backward not supported for maxpool2d if ksize != stride")',
        f"{CANDLE_BACKPROP}#363",
        _pool_backward,
    ),
    Limit(
        "upsample_nearest1d",
        "candle",
        "backward pass with size not a multiple of the input length",
        "candle's upsample_nearest1d has a backward only for integer factors "
        '("backward not supported for non integer upscaling factors")',
        f"{CANDLE_BACKPROP}#380",
        _upsample1d_backward,
    ),
    Limit(
        "upsample_nearest2d",
        "candle",
        "backward pass with size not the same integer multiple of both input sizes",
        "candle's upsample_nearest2d has a backward only for one integer factor on both "
        'axes ("backward not supported for non integer / non uniform upscaling factors")',
        f"{CANDLE_BACKPROP}#396",
        _upsample2d_backward,
    ),
    Limit(
        "gather",
        "burn",
        "index shape ≠ input shape outside dim",
        "burn's Tensor::gather needs the index to have the input's shape in every "
        "dimension but dim (its documented note; TensorCheck::gather panics otherwise)",
        f"{BURN_TENSOR}/base.rs#1896",
        _gather_index_shape,
    ),
    Limit(
        "squeeze",
        "burn",
        "dim's size ≠ 1",
        "burn's Tensor::squeeze_dim drops the dimension, which must have size 1 (its documented "
        '"Panics: If the size in the squeezed dimension is not 1"; PyTorch keeps the tensor as '
        "it is)",
        f"{BURN_TENSOR}/base.rs#813",
        _squeeze_not_one,
    ),
    *_scatter_limits("scatter_add"),
    *_scatter_limits("scatter"),
)


def limits_of(op: str) -> list[Limit]:
    """The table's rows for ``op``, in table order."""
    return [lim for lim in LIMITS if lim.op == op]


def _tracked(case: Mapping[str, Any], inputs: Sequence[Mapping[str, Any]]) -> list[bool]:
    """Per step, whether a backward pass goes through it."""
    if not case.get("loss"):
        return [False] * len(case["steps"])
    grad = {i["name"] for i in inputs if i.get("requires_grad")}
    out = []
    for step in case["steps"]:
        through = any(x in grad for x in step["inputs"])
        if through:
            grad.add(step["out"])
        out.append(through)
    return out


def step_limit(probe: Probe, case: Mapping[str, Any], framework: str) -> Limit | None:
    """The first limit of ``framework`` a step of the normalized ``case`` meets, or None
    (always None for a case that expects an error: its steps are invalid anyway)."""
    if case.get("expect") == ERROR:
        return None
    inputs = probe.spec["inputs"]
    known = probe_shapes.tensor_shapes(inputs, case)
    for step, backward in zip(case["steps"], _tracked(case, inputs), strict=True):
        op = step["op"]["name"]
        for lim in limits_of(op):
            if lim.framework != framework:
                continue
            args = {k: v for k, v in step["op"].items() if k != "name"}
            shapes = [known[x][0] for x in step["inputs"]]
            if lim.applies(Step(args, shapes, known[step["out"]][0], backward)):
                return lim
    return None


def case_limits(probe: Probe, framework: str) -> dict[str, Limit]:
    """Case name → the limit of ``framework`` that case meets, for the cases that meet
    one."""
    out = {}
    for case in probe.cases:
        lim = step_limit(probe, case, framework)
        if lim is not None:
            out[case["name"]] = lim
    return out


def without_cases(probe: Probe, names: Sequence[str]) -> Probe | None:
    """``probe`` without the cases ``names`` (the same probe when none), or None when no
    case is left."""
    if not names:
        return probe
    cases = [c for c in probe.cases if c["name"] not in names]
    if not cases:
        return None
    return Probe(probe.name, {**probe.spec, "cases": cases}, probe.path)


def merge(probe: Probe, outcomes: Sequence[Outcome], limited: Mapping[str, Limit]) -> list[Outcome]:
    """Every quantity's outcome of ``probe`` in its order: a limited case's as
    ``unsupported`` with the limit's message, the others from ``outcomes`` (the runner's
    outcomes of the other cases, in their order)."""
    rest = iter(outcomes)
    out = []
    for case, quantity in probe.quantities():
        if case in limited:
            out.append(Outcome(case, quantity, UNSUPPORTED, message=limited[case].message()))
        else:
            out.append(next(rest))
    return out


def rows() -> list[tuple[str, str, str, str, str]]:
    """The table as (op, framework, condition, reason, source) rows, for the reference."""
    return [(x.op, x.framework, x.condition, x.reason, x.source) for x in LIMITS]
