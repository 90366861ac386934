"""The frameworks the workflow runs, one definition module each.

A definition module (:mod:`.pytorch`, :mod:`.candle`, :mod:`.burn`) says:

* ``NAME``: the framework's name, which every run name starts with;
* ``RUST``: whether its runs are a Rust binary speaking the frame protocol
  (``parity.rust_runner``);
* ``UNSUPPORTED``: its cells of the validity matrix that cannot run, ``(device, dtype)`` →
  reason;
* ``FAULTS``: the deliberate faults its runner implements, kind → what it does;
* ``resolve_run(where, exp, settings, override, config)``: its side of resolving a run's
  settings (defaults it fills in, settings it refuses with :class:`parity.config.ConfigError`).

A fourth framework is one new module here, added to :data:`DEFINITIONS`.
"""

from __future__ import annotations

import re
from types import ModuleType

from . import burn, candle, pytorch

#: Definitions in order, the reference framework first.
DEFINITIONS: dict[str, ModuleType] = {d.NAME: d for d in (pytorch, candle, burn)}
FRAMEWORKS = tuple(DEFINITIONS)
#: Frameworks whose runs are Rust binaries speaking the frame protocol.
RUST_FRAMEWORKS = tuple(n for n, d in DEFINITIONS.items() if d.RUST)
RUN_NAME = re.compile(rf"^({'|'.join(FRAMEWORKS)})(_[a-z0-9]+)*$")

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
