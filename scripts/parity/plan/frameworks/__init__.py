"""The frameworks the workflow runs, one definition module each.

A definition module (:mod:`.pytorch`, :mod:`.candle`, :mod:`.burn`) says:

* ``NAME``: the framework's name, which every run name starts with;
* ``RUST``: whether its runs are a Rust binary speaking the frame protocol
  (``parity.train.rust``); a Rust framework also names ``PINNED_VERSION``, the release the
  workspace's Cargo.lock pins, and ``CRATES``, its crates pinned to it (``parity.plan.versions``);
  optionally ``BACKENDS``, its CPU backends (cargo feature → crate, the default first);
* ``UNSUPPORTED``: its cells of the validity matrix that cannot run, ``(device, dtype)`` →
  reason;
* ``FAULTS``: the deliberate faults its runner implements, kind → what it does;
* ``resolve_run(where, exp, settings, override, config)``: its side of resolving a run's
  settings (defaults it fills in, settings it refuses with :class:`parity.core.config.ConfigError`).

A fourth framework is one new module here, added to :data:`DEFINITIONS`.
"""

from __future__ import annotations

import re
from types import ModuleType

from parity.core.devices import DEVICES
from parity.plan.frameworks import burn, candle, pytorch

#: Definitions in order, the reference framework first.
DEFINITIONS: dict[str, ModuleType] = {d.NAME: d for d in (pytorch, candle, burn)}
FRAMEWORKS = tuple(DEFINITIONS)
#: Frameworks whose runs are Rust binaries speaking the frame protocol.
RUST_FRAMEWORKS = tuple(n for n, d in DEFINITIONS.items() if d.RUST)
RUN_NAME = re.compile(rf"^({'|'.join(FRAMEWORKS)})(_[a-z0-9]+)*\Z")

#: Deliberate faults a run may carry (run setting ``fault: {kind, step}``), by the framework
#: that implements them. Faults that an existing setting expresses (weight decay, learning
#: rate, betas, ``bias_correction: f32``, ``conv_impl: conv1d``) are not repeated here.
FAULTS: dict[str, dict[str, str]] = {n: dict(d.FAULTS) for n, d in DEFINITIONS.items() if d.FAULTS}

#: The validity matrix: (framework, device, dtype) cells that cannot run, with the reason.
#: Every other cell of FRAMEWORKS × DEVICES × DTYPES is supported.
UNSUPPORTED: dict[tuple[str, str, str], str] = {
    (n, dev, dt): reason
    for n, d in DEFINITIONS.items()
    for (dev, dt), reason in d.UNSUPPORTED.items()
}


#: The dtypes of a probe run: the training dtypes (``devices.DTYPES``, which stay f32 and
#: f64) plus half precision, which only probes run. Equal to ``probes.PROBE_DTYPES``.
PROBE_DTYPES = ("f32", "f64", "f16", "bf16")
HALF_DTYPES = ("f16", "bf16")

#: Half-precision probe cells that cannot run although the framework runs float32 on the
#: device, (framework, device, dtype) → reason.
_HALF_UNSUPPORTED = {
    ("burn", "cpu", dt): (
        f"burn-parity's probes run f32 and f64 on burn's backends (ndarray has no {dt}; "
        "Flex has, but the probes do not drive it)"
    )
    for dt in HALF_DTYPES
}

#: The probes' validity matrix over FRAMEWORKS × DEVICES × PROBE_DTYPES: the training
#: matrix for f32 and f64; a half-precision cell cannot run where float32 cannot (a device
#: the framework lacks, with the same reason) or where :data:`_HALF_UNSUPPORTED` says so.
#: Metal's missing float64 does not extend to half precision.
PROBE_UNSUPPORTED: dict[tuple[str, str, str], str] = {
    **UNSUPPORTED,
    **{
        (n, dev, dt): UNSUPPORTED[(n, dev, "f32")]
        for n in DEFINITIONS
        for dev in DEVICES
        for dt in HALF_DTYPES
        if (n, dev, "f32") in UNSUPPORTED
    },
    **_HALF_UNSUPPORTED,
}


def framework_of(run: str) -> str:
    """The framework a run name starts with: ``candle_f32factors`` → ``candle``.
    Raises ``ValueError`` for a name that starts with none."""
    if not RUN_NAME.match(run):
        raise ValueError(f"run name {run!r} does not start with a framework ({FRAMEWORKS})")
    return run.split("_", 1)[0]


def definition(framework: str) -> ModuleType:
    """The definition module of ``framework``; ``KeyError`` for an unknown one."""
    return DEFINITIONS[framework]


def unsupported_reason(framework: str, device: str, dtype: str) -> str | None:
    """Why (framework, device, dtype) cannot run, or None when it can."""
    return UNSUPPORTED.get((framework, device, dtype))


def probe_unsupported_reason(framework: str, device: str, dtype: str) -> str | None:
    """Why a probe cannot run on (framework, device, dtype), or None when it can; ``dtype``
    is one of :data:`PROBE_DTYPES` (see :data:`PROBE_UNSUPPORTED`)."""
    return PROBE_UNSUPPORTED.get((framework, device, dtype))
