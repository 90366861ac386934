"""The diagnosis maths: why a pair of runs differs, step by step (docs/diagnosis.md).

ULP distances counted from the bit patterns, RMSE, how the two float32 runs' signed errors
against their own float64 runs agree, the fp64-referenced rule of PyTorch's compiler checks
(``same()`` in torch/_dynamo/utils.py), the float64 rounding threshold, and the diagnosis
table of a comparison with float64 runs (:func:`float64_tables`, which also gives the
float64 split's rows from the same read of the four traces) with its findings
(:func:`diagnosis_findings`). Differences are ``closeness``'s; the streaming and the
per-step maths are ``maths``'s.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from parity.compare import closeness
from parity.compare.closeness import MaxDiff, fp64_rule_multiplier, max_abs_diff
from parity.compare.maths import aligned, first_row, step_max_diff
from parity.trace.reader import TraceReader

#: Ratio of float64 to float32 unit roundoff, u64 / u32 = 2^-53 / 2^-24.
ROUNDOFF_RATIO = 2.0**-29


def _ordered_bits(x: np.ndarray) -> np.ndarray:
    """Map floats to integers whose order and differences follow the float line: adjacent
    floats differ by 1, and +0 and −0 both map to 0."""
    if x.dtype == np.float32:
        i = x.view(np.int32).astype(np.int64)
        return np.where(i >= 0, i, -(i & 0x7FFFFFFF))
    if x.dtype == np.float64:
        i = x.view(np.int64)
        return np.where(i >= 0, i, -(i & 0x7FFFFFFFFFFFFFFF))
    raise TypeError(f"ULP distance needs float32 or float64, not {x.dtype}")


def ulp_at(a: Mapping[str, np.ndarray], b: Mapping[str, np.ndarray], at: MaxDiff) -> float:
    """ULP distance between a and b at one location (e.g. where |a − b| is largest)."""
    x = np.asarray(a[at.name][at.index : at.index + 1])
    y = np.asarray(b[at.name][at.index : at.index + 1])
    return max_ulp({"v": x}, {"v": y}, ["v"])


def max_ulp(a: Mapping[str, np.ndarray], b: Mapping[str, np.ndarray], names) -> float:
    """Largest distance in units in the last place between paired values of one dtype,
    counted from the bit patterns (one ULP = adjacent representable numbers). NaN if any
    value is NaN. Raises ``TypeError`` for mixed or non-float dtypes.

    Near zero the spacing of floats shrinks, so a value that crosses or nears zero can be
    millions of ULPs from its twin while the absolute difference is tiny; :func:`ulp_at`
    at the largest absolute difference is the figure comparable with the study's "two or
    three ULPs"."""
    worst = 0
    for n in names:
        x, y = np.asarray(a[n]), np.asarray(b[n])
        if x.dtype != y.dtype:
            raise TypeError(f"{n}: ULP distance between {x.dtype} and {y.dtype}")
        if x.size == 0:
            continue
        if np.isnan(x).any() or np.isnan(y).any():
            return math.nan
        with np.errstate(over="ignore"):
            d = np.abs(_ordered_bits(x) - _ordered_bits(y))
        worst = max(worst, int(d.max()))
    return float(worst)


def rmse(a: Mapping[str, np.ndarray], b: Mapping[str, np.ndarray], names) -> float:
    """Root mean square of a − b over every element of every named tensor (float64)."""
    total, count = 0.0, 0
    for n in names:
        d = np.asarray(a[n], np.float64) - np.asarray(b[n], np.float64)
        total += float(np.dot(d, d))
        count += d.size
    return math.sqrt(total / count) if count else 0.0


@dataclass(frozen=True)
class ErrorAgreement:
    """How the two float32 runs' signed errors against their own float64 runs relate."""

    ref: MaxDiff  # largest |ref32 − ref64| (value signed: ref32 − ref64 there)
    cand: MaxDiff  # largest |cand32 − cand64|, signed likewise
    same: bool  # same parameter, same index, same sign
    corr: float  # Pearson correlation of the two signed-error vectors (NaN if constant)
    max_diff: float  # max |(ref32 − ref64) − (cand32 − cand64)| (closeness's rule)


def _signed_max(e: Mapping[str, np.ndarray], names) -> MaxDiff:
    best = MaxDiff(0.0, names[0], 0)
    for n in names:
        if e[n].size == 0:
            continue
        i = int(np.argmax(np.abs(e[n])))
        if abs(e[n][i]) > abs(best.value):
            best = MaxDiff(float(e[n][i]), n, i)
    return best


def error_agreement(r32, r64, c32, c64, names) -> ErrorAgreement:
    """Compare e_ref = ref32 − ref64 with e_cand = cand32 − cand64 (all in float64).

    The study found the two float32 runs' errors identical to 1e-15 for 30 steps: both
    frameworks round the same way, so their mutual difference is far below their drift.
    """
    er = {n: np.asarray(r32[n], np.float64) - np.asarray(r64[n], np.float64) for n in names}
    ec = {n: np.asarray(c32[n], np.float64) - np.asarray(c64[n], np.float64) for n in names}
    mr, mc = _signed_max(er, names), _signed_max(ec, names)
    same = (
        (mr.name, mr.index) == (mc.name, mc.index)
        and np.sign(mr.value) == np.sign(mc.value)
        and mr.value != 0
    )
    x = np.concatenate([er[n] for n in names])
    y = np.concatenate([ec[n] for n in names])
    corr = math.nan
    if x.std() > 0 and y.std() > 0:
        corr = float(np.corrcoef(x, y)[0, 1])
    return ErrorAgreement(mr, mc, bool(same), corr, max_abs_diff(er, ec, names).value)


@dataclass(frozen=True)
class Fp64Rule:
    """Outcome of the fp64-referenced rule at one step."""

    passed: bool
    ref_rmse: float  # RMSE(ref64 − ref32)
    cand_rmse: float  # RMSE(ref64 − cand32)
    multiplier: float

    @property
    def ratio(self) -> float:
        """cand_rmse / ref_rmse (inf when the reference is exact and the candidate not)."""
        if self.ref_rmse == 0:
            return 0.0 if self.cand_rmse == 0 else math.inf
        return self.cand_rmse / self.ref_rmse


def fp64_rule(ref32, cand32, ref64, names, multiplier="auto", atol=1e-9) -> Fp64Rule:
    """The accuracy rule of PyTorch's compiler checks, over the whole parameter vector.

    Source: ``same()`` in torch/_dynamo/utils.py (torch 2.15.0): given an fp64 run of the
    reference, a result passes when RMSE(fp64, result) ≤ multiplier · RMSE(fp64,
    reference) + a small tolerance (there ``tol / 10``; here ``atol``). It asks whether the
    candidate is as close to the float64 truth as the reference is, rather than how close
    the two are to each other. TorchDynamo applies it per output tensor; here it is applied
    to all parameters together, because per tensor a 4-element bias whose float32 value
    happens to round exactly makes the reference's RMSE near zero and the ratio noise
    (measured on a3_adamw: the per-tensor rule failed a correct pair at step 4, the
    whole-vector ratio stayed below 1.4 on every correct pair and above 20 on the float32
    bias-correction ablation).
    """
    numel = sum(np.asarray(ref32[n]).size for n in names)
    m = fp64_rule_multiplier(numel, multiplier)
    ref_err = rmse(ref64, ref32, names)
    cand_err = rmse(ref64, cand32, names)
    return Fp64Rule(bool(cand_err <= m * ref_err + atol), ref_err, cand_err, m)


def f64_rounding_threshold(drift32: float, factor: float) -> float:
    """Largest f64-vs-f64 distance that float64 rounding alone explains at a step.

    The same operations accumulate rounding error in proportion to the unit roundoff
    (forward error analysis; Higham, *Accuracy and Stability of Numerical Algorithms*,
    ch. 2–3). The float32 runs' drift from their own float64 runs measures that
    accumulation at float32 precision, so float64 rounding explains about
    ``drift32 · 2^-29``; ``factor`` (config ``diagnosis.f64_rounding_factor``) is the safety
    margin. Beyond it, the two float64 runs compute different formulas.
    """
    return factor * ROUNDOFF_RATIO * drift32


def float64_tables(
    readers: Mapping[str, TraceReader],
    model: Mapping,
    x: np.ndarray,
    settings: Mapping,
) -> tuple[list[dict], list[dict]]:
    """The float64 split (:func:`split`) and the diagnosis table of a pair with float64
    runs, one row per recorded step each, from one read of the four traces (the split's
    columns are four of the distances the diagnosis computes anyway).

    ``readers`` holds ``ref32``, ``cand32``, ``ref64``, ``cand64`` (checked comparable by the
    caller); ``model`` is the reference run's model settings, ``x`` the fixture's inputs
    ``[batches, batch, …]`` (the ReLU counts use the batch of each step) and ``settings``
    the diagnosis settings (``f64_rounding_factor``, ``fp64_rule``).

    Per step: max|dparam|, max ULP distance and RMSE of the float32 pair; f64 vs f64 with
    the float64-rounding threshold (:func:`f64_rounding_threshold`); the signed errors of
    each float32 run against its own float64 run (:func:`error_agreement`); the
    fp64-referenced rule (:func:`fp64_rule`); and, for ReLU models, how many hidden units
    have different active-sample counts between the two runs in the forward pass of that
    step (parameters of the previous recorded step, that step's batch), for the float32
    and the float64 pair (``activations``).
    """
    from parity.compare import activations

    ordered = [readers[k] for k in ("ref32", "cand32", "ref64", "cand64")]
    relu = model.get("activation") == "relu"
    names = ordered[0].layout.names
    rule_settings = settings["fp64_rule"]
    split_rows, rows, prev = [], [], None
    for recs in aligned(ordered):
        r32, c32, r64, c64 = (rec.tensors for rec in recs)
        step = recs[0].step
        # d32 and d64 also say where; the drifts need only their values (whole-step maxima).
        d32 = max_abs_diff(r32, c32, names)
        d64 = max_abs_diff(r64, c64, names)
        dref, dcand = step_max_diff(recs[0], recs[2], names), step_max_diff(recs[1], recs[3], names)
        drift = max(dref, dcand)
        split_rows.append(
            {
                "step": step,
                "max_dparam": d32.value,
                "torch_f64": dref,
                "candle_f64": dcand,
                "f64_f64": d64.value,
            }
        )
        agree = error_agreement(r32, r64, c32, c64, names)
        rule = fp64_rule(r32, c32, r64, names, rule_settings["multiplier"], rule_settings["atol"])
        row = {
            "step": step,
            "max_dparam": d32.value,
            "max_ulp": max_ulp(r32, c32, names),
            "ulp_at_max": ulp_at(r32, c32, d32),
            "rmse": rmse(r32, c32, names),
            "f64_f64": d64.value,
            "f64_where": d64.where,
            "f64_threshold": f64_rounding_threshold(drift, settings["f64_rounding_factor"]),
            "where": d32.where,
            "ref_err": agree.ref.value,
            "ref_err_where": agree.ref.where,
            "cand_err": agree.cand.value,
            "cand_err_where": agree.cand.where,
            "same_error": agree.same,
            "error_corr": agree.corr,
            "error_max_diff": agree.max_diff,
            "fp64_rule": rule.passed,
            "fp64_ratio": rule.ratio,
            "relu_flips_f32": None,
            "relu_unit_f32": "",
            "relu_flips_f64": None,
            "relu_unit_f64": "",
            "relu_counts_f32": None,
            "relu_counts_f64": None,
        }
        if relu and prev is not None:
            batch = x[(step - 1) % x.shape[0]]
            for kind, (a, b) in (("f32", (prev[0], prev[1])), ("f64", (prev[2], prev[3]))):
                n, unit, ca, cb = activations.first_difference(
                    activations.active_counts(model, a, batch),
                    activations.active_counts(model, b, batch),
                )
                row[f"relu_flips_{kind}"] = n
                row[f"relu_unit_{kind}"] = unit
                row[f"relu_counts_{kind}"] = None if ca is None else f"{ca} vs {cb}"
        rows.append(row)
        prev = (r32, c32, r64, c64)
    return split_rows, rows


def f64_headroom(rows: Sequence[Mapping]) -> float | None:
    """How far f64 vs f64 stays below the float64-rounding threshold over a diagnosis
    table: the smallest ratio ``f64_threshold / f64_f64`` over the steps where f64_f64 > 0
    (below 1 the f64-rounding criterion flags); None when the float64 runs agree exactly
    at every step."""
    ratios = [r["f64_threshold"] / r["f64_f64"] for r in rows if r["f64_f64"] != 0]
    return min(ratios) if ratios else None


def diagnosis_findings(rows: Sequence[Mapping]) -> dict:
    """The localised findings of a diagnosis table: where f64 first leaves float64
    rounding, the first ReLU flip (float32 and float64 pairs), how long the signed errors
    agree, where the fp64-referenced rule first fails, the worst fp64 ratio and ULP
    distance, and the float64 headroom (:func:`f64_headroom`)."""
    # An infinite f64 difference (a float64 run diverged) is never explained by rounding.
    f64 = first_row(rows, lambda r: not closeness.within(r["f64_f64"], r["f64_threshold"]))
    flip = first_row(rows, lambda r: (r["relu_flips_f32"] or 0) > 0)
    flip64 = first_row(rows, lambda r: (r["relu_flips_f64"] or 0) > 0)
    rule_fail = first_row(rows, lambda r: not r["fp64_rule"])
    agree_until = 0
    for r in rows[1:]:
        if not r["same_error"]:
            break
        agree_until = r["step"]
    return {
        "f64_divergence_step": f64 and f64["step"],
        "f64_divergence_where": f64 and f64["f64_where"],
        "f64_divergence_value": f64 and f64["f64_f64"],
        "f64_divergence_threshold": f64 and f64["f64_threshold"],
        "relu_flip_step": flip and flip["step"],
        "relu_flip_unit": flip and flip["relu_unit_f32"],
        "relu_flip_counts": flip and flip["relu_counts_f32"],
        "relu_flip64_step": flip64 and flip64["step"],
        "relu_flip64_unit": flip64 and flip64["relu_unit_f64"],
        "relu_flip64_counts": flip64 and flip64["relu_counts_f64"],
        "signed_agreement_until": agree_until,
        "fp64_rule_first_fail": rule_fail and rule_fail["step"],
        "fp64_worst_ratio": max((r["fp64_ratio"] for r in rows[1:]), default=0.0),
        "worst_ulp": max((r["max_ulp"] for r in rows), default=0.0),
        "f64_headroom": f64_headroom(rows),
    }
