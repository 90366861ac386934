"""The localisation: same-state replay of one step in both frameworks, then the walk (the
job around it, which skips most comparisons without importing this module, is
:mod:`parity.localise.job`).

For one comparison (reference run against candidate run on a device):

1. **Which step.** k is the first step beyond the comparison's tolerance (its per-step
   result), else the first step where the fp64-referenced rule fails, else where the float64
   pair first leaves float64 rounding (its diagnosis result), else 1; or the step config
   ``localise.step`` names.
2. **The state.** The reference run is trained again for k − 1 steps with its optimizer's
   moments recorded (at most one training job's work) and its parameters and moments after
   step k − 1 are the state. They are checked against the reference's own trace at step
   k − 1 where that records every parameter (a replay of a run that does not reproduce its
   trace would localise noise). candle-nn's AdamW keeps its moments private; its runs are
   trained and replayed with the hand-written AdamW, which equals it bit for bit (comparison
   ``manual_identity``).
3. **Four replays** of step k from that state: reference and candidate, float32 and float64
   (the float32 state widened), each recording every intermediate
   (:mod:`parity.localise.walk` names them).
4. **The walk** (:func:`parity.localise.walk.walk`) finds the culprit.

A comparison that passes is localised only on request (config ``localise.all``); one that
cannot be replayed (a framework without a replay, a diverged reference state) raises
:class:`ReplayError`, which the job turns into a result and a table saying why, never a
failed job.
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import os
from collections.abc import Mapping, Sequence

import numpy as np
from safetensors.numpy import save_file

from parity.core.models import model_params
from parity.localise import walk as localise
from parity.plan.keys import Comparison, RunKey, trace_expectation
from parity.plan.versions import run_binary
from parity.trace.reader import TraceReader
from parity.trace.schema import TraceError, extra_column


class ReplayError(RuntimeError):
    """A comparison that cannot be replayed; the message says why."""


def choose_step(perstep: Mapping, diagnosis: Mapping | None, setting: int | str) -> tuple[int, str]:
    """(k, why): the step to replay (see the module docs). ``setting`` is ``auto`` or a
    step number."""
    if setting != "auto":
        return int(setting), "config localise.step"
    if perstep.get("tol_exceeded_step"):
        return int(perstep["tol_exceeded_step"]), "first step beyond the tolerance"
    findings = diagnosis or {}
    if findings.get("fp64_rule_first_fail"):
        return int(findings["fp64_rule_first_fail"]), "first step the fp64-referenced rule fails"
    if findings.get("f64_divergence_step"):
        return int(findings["f64_divergence_step"]), "first step f64 leaves float64 rounding"
    return 1, "no step differs: step 1"


def _state_settings(settings: Mapping, k: int) -> tuple[dict, str]:
    """The reference's settings for training k − 1 steps with its moments recorded, and a
    note when the optimizer had to be swapped for one that exposes them."""
    s = copy.deepcopy(dict(settings))
    s["steps"] = k - 1
    adam = s["optimizer"]["name"] != "sgd"
    s["record"] = {"every": max(1, k - 1), "tensors": None, "grads": False, "moments": adam}
    note = ""
    opt = s["optimizer"]
    if (
        s["framework"] == "candle"
        and opt["name"] == "adamw"
        and opt.get("implementation") == "candle"
    ):
        opt["implementation"] = "manual"
        note = (
            "candle_nn::AdamW keeps its moments private: the reference's state was trained "
            "with the hand-written AdamW, equal to it bit for bit"
        )
    return s, note


def _torch_net(settings: Mapping):
    """The PyTorch model maker of a run: an own model's ``OwnNet``, else the built-in
    families' functional ``Net``."""
    from parity.train import torch as torch_runner

    if settings["model"]["family"] == "own":
        from parity.own.torch_model import OwnNet

        return OwnNet
    return torch_runner.Net


def _watch(key: RunKey, settings: Mapping, limit: float | None):
    """A watchdog over a PyTorch run's calls into an own model's code
    (:func:`parity.core.usercode.watching`, ``limit`` seconds without progress, None: the
    job's ``limits.user_code_idle_seconds``); nothing for a built-in family."""
    if settings["model"]["family"] != "own":
        return contextlib.nullcontext()
    from parity.core import usercode

    return usercode.watching(key.experiment, settings["model"]["torch"], limit)


def _train(
    key: RunKey, settings, fixture, out, threads, log, log_path, limit=None, build=None
) -> None:
    if key.framework == "torch":
        from parity.train import torch as torch_runner

        with _watch(key, settings, limit):
            torch_runner.train(key, settings, fixture, out, threads, log, _torch_net(settings))
    else:
        from parity.train import rust as rust_runner

        binary = run_binary(settings, key.device)
        rust_runner.train(key, settings, fixture, binary, out, threads, log, log_path, build)


def reference_state(
    key: RunKey,
    settings: Mapping,
    fixture: str,
    k: int,
    tmp: str,
    threads: int,
    log,
    log_path,
    limit: float | None = None,
    build: Mapping | None = None,
) -> tuple[dict[str, np.ndarray], list[str]]:
    """The state after step k − 1 of run ``key`` (parameters in their PyTorch shapes and,
    for Adam/AdamW, ``exp_avg:``/``exp_avg_sq:`` moments), and notes. An own model's
    PyTorch training is stopped after ``limit`` seconds without a step (None: the job's
    ``limits.user_code_idle_seconds``; :mod:`parity.core.usercode`); a Rust run's binary
    must be ``build`` (its name and source id, ``Plan.build_identity``) when given. Raises
    :class:`ReplayError` for a state that cannot be replayed."""
    shapes = dict(model_params(settings["model"]))
    names = list(shapes)
    adam = settings["optimizer"]["name"] != "sgd"
    notes = []
    if k == 1:
        from parity.trace import fixtures

        fx = fixtures.load(fixture)
        dt = np.float32 if key.dtype == "f32" else np.float64
        state = {n: np.asarray(fx[n], dt) for n in names}
        if adam:
            for n in names:
                state[f"exp_avg:{n}"] = np.zeros(shapes[n], dt)
                state[f"exp_avg_sq:{n}"] = np.zeros(shapes[n], dt)
        _check_finite(state, k)
        return state, ["state: the fixture (step 1)"]
    s, note = _state_settings(settings, k)
    if note:
        notes.append(note)
    out = os.path.join(tmp, "state-trace.parquet")
    _train(key, s, fixture, out, threads, log, log_path, limit, build)
    kinds = ("exp_avg", "exp_avg_sq") if adam else ()
    columns = names + [extra_column(kind, n) for n in names for kind in kinds]
    # read against what it must carry (the runner source id of ``build`` included), which
    # also bounds its footer by the sizes the plan checked against the config's limits
    # (schema.reader_limits)
    rec = TraceReader(out, expect=_expectation(key, s, build)).read_step(k - 1, columns)
    state = {}
    for n in names:
        state[n] = rec.tensors[n].reshape(shapes[n])
        for kind in kinds:
            state[f"{kind}:{n}"] = rec.tensors[extra_column(kind, n)].reshape(shapes[n])
    _check_finite(state, k)
    notes.append(_check_against_trace(key, settings, state, names, k, build))
    return state, notes


def _expectation(key: RunKey, settings: Mapping, build: Mapping | None) -> dict:
    """What a trace of ``key`` with ``settings`` must carry (``keys.trace_expectation``) and,
    with ``build`` (a Rust run's binary identity, ``Plan.build_identity``), the source id
    of the build that must have made it (``runner_source_id``), as ``Plan.trace_expectation``
    gives it."""
    out = trace_expectation(key, settings)
    if build:
        out["runner_source_id"] = build["source_id"]
    return out


def _check_finite(state: Mapping[str, np.ndarray], k: int) -> None:
    """Refuse a state holding a NaN or an Inf (:class:`ReplayError`, naming the tensor)."""
    bad = [n for n, v in state.items() if not np.isfinite(v).all()]
    if bad:
        raise ReplayError(
            f"the reference's state after step {k - 1} is not finite ({bad[0]}): a diverged "
            "step cannot be replayed"
        )


def _check_against_trace(
    key: RunKey, settings: Mapping, state, names, k: int, build: Mapping | None = None
) -> str:
    """Whether the retrained state equals the reference trace at step k − 1, bit for bit.
    The trace is held to its full expectation (:func:`_expectation`: with ``build``, the
    source id of the build that must have made it): a trace another build made (its binary
    copied in with its record) raises :class:`ReplayError` naming it, as the comparison
    refuses it; a trace that cannot be read leaves the state unchecked, with a note."""
    try:
        trace = TraceReader(key.trace, expect=_expectation(key, settings, build))
    except OSError as e:
        return f"state not checked against the reference trace ({e})"
    except TraceError as e:
        if not os.path.exists(key.trace):
            return f"state not checked against the reference trace ({e})"
        raise ReplayError(f"the reference trace cannot be replayed from: {e}") from e
    try:
        rec = trace.read_step(k - 1, names)
    except (OSError, KeyError, ValueError) as e:
        return f"state not checked against the reference trace ({e})"
    same = all(
        np.array_equal(rec.tensors[n], state[n].reshape(-1)) for n in names if n in rec.tensors
    )
    if not same:
        raise ReplayError(
            f"retraining {key.label} for {k - 1} steps does not reproduce its trace at step "
            f"{k - 1}: the run is not deterministic, so a replay would localise noise"
        )
    return f"state after step {k - 1} equals the reference trace bit for bit"


def run_replay(
    key: RunKey,
    settings: Mapping,
    fixture: str,
    state: Mapping,
    state_path: str,
    k: int,
    threads: int,
    log_path: str | None,
    limit: float | None = None,
    build: Mapping | None = None,
) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """One replay of step ``k`` of ``key`` from ``state`` (see :mod:`parity.localise.replay`);
    an own model's PyTorch replay is stopped after ``limit`` seconds without progress
    (:func:`reference_state`); a Rust replay's binary must be ``build`` when given."""
    adam = settings["optimizer"]["name"] != "sgd"
    if key.framework == "torch":
        from parity.train import torch as torch_runner

        with _watch(key, settings, limit):
            return torch_runner.replay(
                settings,
                fixture,
                state,
                k - 1 if adam else 0,
                k,
                key.device,
                key.dtype,
                threads,
                _torch_net(settings),
            )
    from parity.train import rust as rust_runner

    try:
        return rust_runner.replay(
            key,
            settings,
            fixture,
            run_binary(settings, key.device),
            state_path,
            k,
            threads,
            log_path,
            build=build,
        )
    except rust_runner.RunnerError as e:
        raise ReplayError(f"{key.label}: {e}") from None


def culprit_module(culprit: str | None, dataflow: Sequence[Mapping] | None) -> str | None:
    """What module of an own model ``culprit`` belongs to, from its PyTorch replay's
    ``dataflow``: "`1` is a `Tanh`" for ``1.out``, ``grad:1.out`` or a parameter's
    ``grad:1.weight`` or ``update:1.weight`` (the module named by its path, as in
    ``nn.Sequential``, where a path alone says little); None for no culprit, a quantity of
    no recorded module (``output``, ``loss``) or a built-in family (no dataflow)."""
    if not culprit or not dataflow:
        return None
    name = culprit.partition(":")[2] if ":" in culprit else culprit
    types = {d["name"]: d.get("module") for d in dataflow}
    path = name.removesuffix(".out") if name.endswith(".out") else name.rpartition(".")[0]
    kind = types.get(f"{path}.out")
    return f"`{path}` is a `{kind}`" if kind and path else None


def localise_comparison(job: Mapping, tmp: str, log: logging.Logger, log_path: str | None) -> dict:
    """Run the replays and the walk for ``job`` (``Plan.localise_params``). Returns the result
    (step, culprit, rows, notes; the job adds its status). Raises :class:`ReplayError` when
    it cannot."""
    comp = Comparison.from_params(job["comparison"])
    loc = job["localise"]
    if loc["unreplayable"]:
        raise ReplayError(loc["unreplayable"])
    settings, fixture, threads = loc["settings"], loc["fixture"], loc["threads"]
    k, why = choose_step(job["perstep"], job.get("diagnosis_result"), loc["step"])
    log.info("%s %s: replaying step %d (%s)", comp.experiment, comp.tag, k, why)
    ref_settings = settings[comp.reference.run]
    if k > ref_settings["steps"]:
        raise ReplayError(
            f"step {k} ({why}) is beyond the experiment's {ref_settings['steps']} steps"
        )
    builds = loc.get("builds") or {}
    ref_build = builds.get("ref32")
    state, notes = reference_state(
        comp.reference, ref_settings, fixture, k, tmp, threads, log, log_path, build=ref_build
    )
    state_path = os.path.join(tmp, "state.safetensors")
    save_file({n: np.ascontiguousarray(v) for n, v in state.items()}, state_path)
    keys = {role: RunKey(**k) for role, k in loc["replays"].items()}
    if "ref64" not in keys:
        notes.append(f"no float64 replay ({loc['no_f64']}): judged against float32 rounding only")
    records, missing, dataflow = {}, {}, None
    params = [n for n, _ in model_params(ref_settings["model"])]
    flat_state = {n: state[n].reshape(-1) for n in params}
    for role, key in keys.items():
        tensors, header = run_replay(
            key,
            settings[key.run],
            fixture,
            state,
            state_path,
            k,
            threads,
            log_path,
            build=builds.get(role),
        )
        records[role] = localise.derive_updates(tensors, flat_state, params)
        if role == "ref32" and header.get("dataflow"):
            dataflow = json.loads(header["dataflow"])
        if header.get("replay_note"):
            notes.append(f"{role} ({key.label}): {header['replay_note']}")
        for item in filter(None, (header.get("missing") or "").split("; ")):
            name, _, reason = item.partition(": ")
            missing[name] = f"{key.framework}: {reason}"
        log.info("replayed %s: %d tensors", key.label, len(tensors))
    batch = int(loc["batch_size"])
    s = localise.Settings(
        multiplier=job["diagnosis"]["fp64_rule"]["multiplier"],
        atol=float(job["diagnosis"]["fp64_rule"]["atol"]),
        f64_rounding_factor=float(job["diagnosis"]["f64_rounding_factor"]),
        f32_floor_ulps=float(loc["f32_floor_ulps"]),
    )
    if ref_settings["model"]["family"] == "own" and dataflow is None:
        raise ReplayError(
            f"{comp.reference.label}: an own model is localised through the PyTorch replay's "
            "forward hooks; the reference is not a PyTorch run"
        )
    w = localise.walk(ref_settings["model"], batch, records, missing, s, dataflow)
    module = culprit_module(w.culprit, dataflow)
    if module:
        notes.append(f"the culprit's module: {module}")
    return {
        "step": k,
        "step_reason": why,
        "culprit": w.culprit,
        "culprit_phase": w.culprit_phase,
        "reason": "",
        "notes": notes,
        "rows": w.rows,
    }
