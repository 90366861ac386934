"""The identities of run jobs and comparisons, and the paths they name.

* *run key*: (experiment, run, dtype, device), one job and one trace;
* *comparison*: a reference run against a candidate run on one device; ``main`` is the
  study's pair and writes the paths without a comparison name.

Both convert to plain data for a rule's params and back. Pure Python: cheap to import.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from parity.core import paths
from parity.core.config import MAIN, canonical_hash
from parity.core.models import model_params
from parity.plan import frameworks


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
        return frameworks.framework_of(self.run)

    @property
    def trace(self) -> str:
        """Path of the trace, relative to the working directory."""
        return paths.TRACE.format(**self.__dict__)

    @property
    def log(self) -> str:
        """Path of the training job's log."""
        return paths.TRAIN_LOG.format(**self.__dict__)

    @property
    def label(self) -> str:
        """Short human label: ``candle f32 cpu``."""
        return f"{self.run} {self.dtype} {self.device}"

    @property
    def supported(self) -> bool:
        """Whether the validity matrix allows this run."""
        return frameworks.unsupported_reason(self.framework, self.device, self.dtype) is None


def trace_expectation(key: RunKey, settings: Mapping[str, Any]) -> dict:
    """What a trace of ``key``, a run with resolved ``settings``, must carry (see
    ``reader.TraceReader``): its identity, steps, recording interval, ``config_hash`` (the
    canonical hash of ``settings``), recorded parameters with their shapes and, for a run
    of a Rust framework, the release its binary reports (``framework_version``), so a
    binary built from another release is refused; for a PyTorch run, first, the torch
    release it must have been made by (``torch_version``: the run's setting, the installed
    one, ``versions.torch_version``), so a trace of another torch is refused by name."""
    shapes = dict(model_params(settings["model"]))
    recorded = settings["record"].get("tensors") or list(shapes)
    out = {}
    if settings.get("torch_version"):
        out["torch_version"] = settings["torch_version"]
    out |= {
        "experiment": key.experiment,
        "run": key.run,
        "framework": key.framework,
        "dtype": key.dtype,
        "device": key.device,
        "steps": settings["steps"],
        "record_every": settings["record"]["every"],
        "config_hash": canonical_hash(settings),
        "params": {n: shapes[n] for n in recorded},
    }
    if "version" in settings:
        out["framework_version"] = settings["version"]
    return out


#: The rule that makes every table of a comparison with float64 runs (per-step, split and
#: diagnosis, in one job), and the one that makes the per-step table of a comparison without
#: them (a run with no float64, such as candle's fused norm); ``Comparison.job``.
COMPARE_JOB, PERSTEP_JOB = "compare", "perstep"


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

    def _fill(self, pattern: str, kind: str, **more) -> str:
        return paths.fill(pattern, experiment=self.experiment, kind=kind, tag=self.tag, **more)

    def _localise(self, pattern: str, **more) -> str:
        return paths.fill(
            pattern, experiment=self.experiment, comparison=self.name, device=self.device, **more
        )

    def table(self, kind: str, ext: str = "csv") -> str:
        """``results/tables/{experiment}/{kind}-{tag}.{ext}`` (kind: perstep, split,
        diagnosis); ``…/localise-{comparison}-{device}.{ext}`` for the localisation."""
        if kind == "localise":
            return self._localise(paths.LOCALISE_TABLE, ext=ext)
        return self._fill(paths.TABLE, kind, ext=ext)

    def figure(self, kind: str, ext: str = "png") -> str:
        """``results/figures/{experiment}/{kind}-{tag}.{ext}`` (localisation: as
        :meth:`table`)."""
        if kind == "localise":
            return self._localise(paths.LOCALISE_FIGURE, ext=ext)
        return self._fill(paths.FIGURE, kind, ext=ext)

    @property
    def job(self) -> str:
        """The rule that makes this comparison's tables but the localisation: ``compare``
        (per-step, split and diagnosis in one job) with float64 runs, else ``perstep``."""
        return COMPARE_JOB if self.f64_pair is not None else PERSTEP_JOB

    def log(self, kind: str) -> str:
        """Log of the job that makes this comparison's ``kind`` table (:attr:`job`, or the
        localisation's)."""
        if kind == "localise":
            return self._localise(paths.LOCALISE_LOG)
        return self._fill(paths.COMPARE_LOG, self.job)

    def result(self, kind: str) -> str:
        """Machine-readable result of one table, gathered by the summary."""
        if kind == "localise":
            return self._localise(paths.LOCALISE_RESULT)
        return self._fill(paths.COMPARE_RESULT, kind)

    @property
    def keys(self) -> dict[str, RunKey]:
        """The runs it reads by role: ``ref32``, ``cand32`` and, with float64 runs,
        ``ref64``, ``cand64`` (the primary dtype is float32 where configured)."""
        out = {"ref32": self.reference, "cand32": self.candidate}
        if self.f64_pair is not None:
            out["ref64"], out["cand64"] = self.f64_pair
        return out

    @property
    def traces(self) -> list[str]:
        """Every trace this comparison reads (perstep pair, then the f64 pair if any)."""
        return [k.trace for k in self.keys.values()]

    @property
    def kinds(self) -> list[str]:
        """Its tables: per-step always; split and diagnosis need float64 runs; the
        localisation (``parity.localise.replay``) needs a float32 pair."""
        kinds = ["perstep"] + (["split", "diagnosis"] if self.f64_pair else [])
        return kinds + (["localise"] if self.reference.dtype == "f32" else [])

    def to_params(self) -> dict:
        """As plain data (a rule's params); :meth:`from_params` reverses it."""
        return asdict(self)

    @classmethod
    def from_params(cls, p: Mapping[str, Any]) -> Comparison:
        """The comparison :meth:`to_params` described."""
        f64 = p["f64_pair"]
        return cls(
            p["experiment"],
            p["name"],
            p["device"],
            RunKey(**p["reference"]),
            RunKey(**p["candidate"]),
            p["expect"],
            float(p["tolerance"]),
            None if f64 is None else (RunKey(**f64[0]), RunKey(**f64[1])),
        )
