"""The check of an own model's Rust port before any of its training jobs (rule
``own_check``): the port built from the fixture must have the PyTorch model's parameters.

The runner's ``inspect`` subcommand builds the user's model from the fixture (as ``train``
does), runs one forward pass and one ``backward`` on the first batch, and reports as JSON
(``parity_common::Inspection``):

* ``params``: what the model asked for, ``[state_dict key, shape]`` (after the config's
  rename table), in the order it asked;
* ``missing``: names it asked for that the fixture does not hold; ``shape_mismatch``:
  ``[name, fixture shape, asked shape]``;
* ``output_shape``: its output's shape on the first batch;
* ``no_grad``: parameters without a gradient after that backward (a fused op without a
  backward pass cuts the graph silently in candle 0.11);
* ``forward_error`` / ``backward_error``: the framework's own error, when it could not.

:func:`judge` compares that with the PyTorch model's parameters (its model card) and the
output the loss expects. A port that asks for other parameters, misses some, has another
shape or gives an output of another shape is refused here, every difference listed, before
a training job starts; parameters without a gradient and a backward that fails are
recorded (the comparison names them, and the training job reports the framework's error),
not refused: they are findings about the port, not mistakes in the setup.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping
from typing import Any

from parity.core.fileio import write_text_atomic
from parity.core.models import model_params
from parity.core.watchdog import run_captured
from parity.plan.keys import RunKey
from parity.plan.own import expected_output
from parity.plan.runspec import runner_spec
from parity.trace import fixtures
from parity.train.rust import RunnerError, check_binary, invocation, log_tail


class PortMismatch(RuntimeError):
    """A Rust port that does not match the PyTorch model; the message lists every
    difference."""


def judge(inspection: Mapping[str, Any], model: Mapping[str, Any], batch: int) -> list[str]:
    """Every difference between the port (``inspection``) and the PyTorch model (its
    resolved ``model``), one line each; empty when they match."""
    problems = []
    missing = list(inspection.get("missing", []))
    mismatched = {n for n, _, _ in inspection.get("shape_mismatch", [])}
    error = inspection.get("build_error")
    # A build that only asked for names the fixture lacks or holds with another shape ran
    # to its end (the inspection's store serves zeros of the asked shape), so what it did
    # not ask for is known too; a build that failed stops the check at its error.
    if error and not ((missing or mismatched) and "then the build failed" not in error):
        return [f"the port cannot be built from the fixture: {error}"]
    want = {n: list(s) for n, s in model_params(model)}
    want.update({n: list(s) for n, s in model.get("buffers", {}).items()})
    got = {n: list(s) for n, s in inspection["params"]}
    for n in missing:
        problems.append(f"the port asks for {n!r}, which the PyTorch model does not have")
    unhanded = model.get("other_buffers", [])
    leaves = {n.rsplit(".", 1)[-1] for n in missing}
    if any(b.rsplit(".", 1)[-1] in leaves for b in unhanded):
        problems.append(
            "the PyTorch model has buffers it does not hand to the port: "
            f"{', '.join(unhanded)}; name those the port needs in model.buffers (and in "
            "model.rename where the port names them differently)"
        )
    for n, fixture_shape, asked in inspection.get("shape_mismatch", []):
        problems.append(f"{n}: the port asks for shape {asked}, PyTorch's is {fixture_shape}")
    buffers = model.get("buffers", {})
    absent = [n for n in want if n not in got and n not in buffers and n not in mismatched]
    if absent:
        problems.append(
            f"the port never asks for {len(absent)} of PyTorch's parameters: "
            + ", ".join(absent)
            + " (rename them in model.rename if the port names them differently)"
        )
    extra = [n for n in got if n not in want]
    if extra and not missing:
        problems.append(f"the port asks for tensors PyTorch's model lacks: {', '.join(extra)}")
    if error:
        return problems
    if not inspection.get("forward_error") and not inspection.get("backward_error"):
        # after a backward pass: no_grad lists the port's parameters without a gradient
        no_grad = set(inspection.get("no_grad", []))
        trained = [n for n in model.get("frozen", []) if n in got and n not in no_grad]
        if trained:
            problems.append(
                "the port trains parameters PyTorch's model freezes (requires_grad=False): "
                f"{', '.join(trained)}; serve each without a gradient, as docs/own-model.md "
                "shows (candle: vb.get(…)?.detach(); burn: Param::set_require_grad(false) in "
                "init)"
            )
    if inspection.get("forward_error"):
        problems.append(f"the port's forward pass fails: {inspection['forward_error']}")
    else:
        shape = expected_output(model, batch)
        out = inspection.get("output_shape")
        if shape is not None and out is not None and list(out) != shape:
            problems.append(
                f"the port's output has shape {list(out)}; the loss needs {shape} "
                f"({model['io']['target']['kind']} targets)"
            )
        elif out is not None and math.prod(out) == 0:
            problems.append(f"the port's output is empty (shape {list(out)})")
    return problems


def not_json(stdout: bytes) -> str:
    """What to add to "inspect wrote no JSON": the start of what it wrote on its protocol
    channel (``stdout``; printable bytes only, others as ``?``) and, when that is text other
    than JSON, that the port writes to standard output. (The runner points the port's
    standard output at standard error, ``parity_common::frames::protocol_output``, so this
    is what something that writes to the channel nonetheless is told.)"""
    text = stdout.lstrip()
    if not text:
        return "; it wrote nothing to standard output"
    shown = "".join(chr(b) if 32 <= b < 127 else "?" for b in text[:80])
    more = "…" if len(text) > 80 else ""
    if text[:1] in (b"{", b"["):
        return f"; its output starts with {shown!r}{more}"
    return (
        f"; its output starts with {shown!r}{more}: the port writes to standard output; use "
        "eprintln! (standard error goes to the job's log)"
    )


def own_check(
    key: RunKey,
    settings: Mapping[str, Any],
    fixture: str,
    binary: str,
    out: str,
    log: logging.Logger,
    log_path: str | None,
    build: Mapping[str, str] | None = None,
) -> dict:
    """Inspect the port of run ``key`` (its framework's own-model runner ``binary``) and
    write the inspection with the verdict to ``out`` (JSON). Raises :class:`PortMismatch`
    listing every difference (nothing is written), :class:`RunnerError` when the binary's
    build record is not ``build``'s (the rule's param: the binary's name and source id as
    this checkout and config build it; another port's binary copied in), when it
    fails, writes no JSON, or makes no progress for ``limits.user_code_idle_seconds``
    (:mod:`parity.core.watchdog`: stopped, the message naming the experiment, the binary
    and its pid)."""
    fixtures.load(fixture)
    check_binary(binary, build)
    spec = runner_spec(key, settings, fixture)
    what = f"{key.experiment}: the {key.framework} port's inspect (own_check)"
    with invocation(spec, 1, log_path) as (spec_path, env, stderr):
        cmd = [binary, "inspect", "--spec", spec_path]
        status, stdout, stopped = run_captured(cmd, what, env, stderr)
    if stopped:
        raise RunnerError(stopped)
    if status != 0:
        tail = log_tail(log_path) if log_path else ""
        raise RunnerError(f"{binary} inspect exited with status {status}:\n{tail}")
    try:
        inspection = json.loads(stdout)
    except ValueError as e:
        raise RunnerError(f"{binary} inspect wrote no JSON ({e}){not_json(stdout)}") from None
    problems = judge(inspection, settings["model"], settings["data"]["batch_size"])
    if problems:
        raise PortMismatch(
            f"{key.experiment}: the {key.framework} port does not match the PyTorch model "
            f"(the port was not trained):\n  " + "\n  ".join(problems)
        )
    result = {
        "experiment": key.experiment,
        "framework": key.framework,
        "inspection": inspection,
        "no_grad": list(inspection.get("no_grad", [])),
        "backward_error": inspection.get("backward_error"),
    }
    if result["no_grad"]:
        log.warning(
            "%d parameters get no gradient in the %s port: %s",
            len(result["no_grad"]),
            key.framework,
            ", ".join(result["no_grad"]),
        )
    if result["backward_error"]:
        log.warning("the %s port's backward fails: %s", key.framework, result["backward_error"])
    write_text_atomic(out, json.dumps(result, indent=1, sort_keys=True))
    return result
