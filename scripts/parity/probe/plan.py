"""Which probe jobs run: one per (probe, framework, dtype, device), and the probe table's
inputs, from the config's ``probes`` key. The probe format itself is :mod:`parity.probe.format`.
Pure Python: it runs while the DAG is built.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from parity.core import paths, userpath
from parity.core.devices import DEVICES
from parity.core.memo import Memo
from parity.plan import frameworks, versions
from parity.plan import limits as size_limits
from parity.plan.frameworks import PROBE_DTYPES, probe_unsupported_reason
from parity.probe.format import Probe
from parity.probe.loader import discover

#: Frameworks with a probe interpreter (PyTorch: probe_torch.py; candle and burn: the
#: ``candle-parity probe`` and ``burn-parity probe`` subcommands). burn runs on the CPU only
#: (``frameworks.unsupported_reason``); an op its API lacks is an ``unsupported`` outcome.
PROBE_FRAMEWORKS = ("torch", "candle", "burn")
#: Where a quantity's reference comes from when the probe gives no exact values.
REFERENCE_FRAMEWORK, REFERENCE_DEVICE = "torch", "cpu"
#: The float64 reference of the float64-referenced rule (``parity.probe.results``): PyTorch on the
#: CPU in float64, run whenever any probe dtype runs.
REFERENCE64_DTYPE = "f64"
#: The float64-referenced rule's settings when the config gives none (config
#: ``probes.fp64_rule``): the multiplier of ``closeness.fp64_rule_multiplier`` and the floor
#: in ulps of the run dtype.
FP64_RULE_DEFAULTS = {"multiplier": "auto", "floor_ulps": 1.0}


def build_key(framework: str, version: str, device: str) -> str:
    """How :attr:`ProbePlan.source_ids` names a Rust runner build: ``candle 0.11.0 cpu``."""
    return f"{framework} {version} {device}"


def runner_source_ids(
    config: Mapping[str, Any], configured: Mapping[str, Sequence[str]], devices: Sequence[str]
) -> dict[str, str]:
    """The source id (``parity.plan.builds.runner_build``) of every Rust runner build the
    probes may use: each configured release on each device, by :func:`build_key`. A build
    whose files cannot be read (a release without its lock file, refused by the config
    check) has none."""
    from parity.plan import builds

    out = {}
    for fw, releases in configured.items():
        for version in releases:
            for device in devices:
                try:
                    build = builds.runner_build(config, fw, version, device)
                except OSError:
                    continue
                out[build_key(fw, version, device)] = build["source_id"]
    return out


@dataclass(frozen=True, order=True)
class ProbeKey:
    """One probe job and its result file: (probe, framework, dtype, device), and for a
    further release of a Rust framework (config ``candle.versions``) that ``version``; ""
    is the framework's primary release (``parity.plan.versions``)."""

    probe: str
    framework: str
    dtype: str
    device: str
    version: str = ""

    @property
    def runner(self) -> str:
        """The framework, with a further release's suffix: ``candle``, ``candle_v0_11_1``."""
        return self.framework + (versions.suffix(self.version) if self.version else "")

    @property
    def result(self) -> str:
        """``results/probes/{probe}/{runner}-{dtype}-{device}.parquet``."""
        return paths.PROBE_RESULT.format(
            probe=self.probe, framework=self.runner, dtype=self.dtype, device=self.device
        )

    @property
    def label(self) -> str:
        """Short human label: ``candle f32 cpu``, ``candle_v0_11_1 f32 cpu``."""
        return f"{self.runner} {self.dtype} {self.device}"

    @property
    def base_device(self) -> str:
        """The device without its host: ``cpu`` for ``cpu`` and for a remote host's
        ``cpu@mac`` (a row of the probe table judging a result brought back from ``mac``,
        ``hosts.device_label``). A probe's ``known_bug`` entries name this device."""
        return self.device.split("@", 1)[0]

    @property
    def reference(self) -> ProbeKey:
        """The run this one is compared with when the probe gives no exact values."""
        return ProbeKey(self.probe, REFERENCE_FRAMEWORK, self.dtype, REFERENCE_DEVICE)

    @property
    def is_reference(self) -> bool:
        """Whether this run is the reference itself."""
        return self == self.reference

    @property
    def reference64(self) -> ProbeKey:
        """The float64 reference of the float64-referenced rule: PyTorch on the CPU in
        float64 (for an f64 run, the same run as :attr:`reference`)."""
        return ProbeKey(self.probe, REFERENCE_FRAMEWORK, REFERENCE64_DTYPE, REFERENCE_DEVICE)


class ProbePlan:
    """The probes that run, on which devices and in which dtypes: jobs and table inputs.

    Build it with :meth:`from_config` while the DAG is built; jobs rebuild it from plain
    data (:meth:`to_params` / :meth:`from_params`) without reading the probe files again.
    ``dtypes`` are probe dtypes (``frameworks.PROBE_DTYPES``: f32, f64, f16, bf16);
    ``fp64_rule`` the settings of the float64-referenced rule (``multiplier``: ``"auto"`` or
    a number; ``floor_ulps``), missing keys from :data:`FP64_RULE_DEFAULTS`; ``releases``
    each Rust framework's further releases (``versions.configured`` less the primary one),
    probed as cells of their own; ``primaries`` each Rust framework's primary release;
    ``source_ids`` the source id this checkout and config build for each Rust runner
    (:meth:`source_id`, keyed by :func:`build_key`), which a result's recorded one must
    be. Raises ``ValueError`` for an unknown dtype.
    """

    def __init__(
        self,
        probes: Mapping[str, Probe],
        devices: Sequence[str],
        dtypes: Sequence[str],
        fp64_rule: Mapping[str, Any] | None = None,
        releases: Mapping[str, Sequence[str]] | None = None,
        primaries: Mapping[str, str] | None = None,
        source_ids: Mapping[str, str] | None = None,
    ):
        unknown = [d for d in dtypes if d not in PROBE_DTYPES]
        if unknown:
            raise ValueError(f"probe dtype {unknown[0]!r} is not one of {PROBE_DTYPES}")
        self.probes: dict[str, Probe] = dict(probes)
        self.devices: list[str] = list(devices)
        self.dtypes: list[str] = list(dtypes)
        self.fp64_rule: dict[str, Any] = {**FP64_RULE_DEFAULTS, **(fp64_rule or {})}
        self.releases: dict[str, list[str]] = {k: list(v) for k, v in (releases or {}).items()}
        self.primaries: dict[str, str] = dict(primaries or {})
        self.source_ids: dict[str, str] = dict(source_ids or {})

    @classmethod
    def from_config(
        cls,
        config: Mapping[str, Any],
        basedir: str | Path,
        workdir: str | Path | None = None,
        memo: Memo | None = None,
    ) -> ProbePlan:
        """The config's ``probes`` key resolved (``folder``, ``select``, ``enabled``,
        ``dtypes``: default every one of ``frameworks.PROBE_DTYPES``, independent of the
        training ``dtypes``; ``fp64_rule``).

        ``config`` has passed ``schemas/config.schema.yaml``; a relative ``probes.folder`` is
        resolved against ``basedir``, the workflow's folder (probes are part of the workflow,
        like its scripts). With ``workdir`` (the jobs' working directory), each probe's
        :attr:`Probe.path` is relative to it (``probes/x.yaml`` when it is ``basedir``): a
        job's input then does not name the folder the project lies in, so a copy of the
        project with its results stays up to date. Raises ``ConfigError`` at
        ``probes.folder`` (``fuzz.known_bugs``) for a folder that does not resolve to a
        readable folder, ``format.ProbeError`` for a missing selected probe or a malformed
        probe file. ``memo``: the working folder's
        record of probe files read before (``loader.load``).
        """
        settings = config.get("probes") or {}
        enabled = settings.get("enabled", True)
        folder = Path(settings.get("folder", "probes"))
        folder = folder if folder.is_absolute() else Path(basedir) / folder
        if enabled:  # checked as the file system resolves it; named as the config does
            userpath.check("probes.folder", settings.get("folder", "probes"), "folder", basedir)
        known = (config.get("fuzz") or {}).get("known_bugs")
        if known is not None:
            # read by the fuzz target only, but a config names it: held to it here, once
            userpath.check("fuzz.known_bugs", known, "folder", basedir)
        limits = size_limits.settings(config)
        probes = discover(folder, settings.get("select"), limits, memo) if enabled else {}
        if workdir is not None:
            probes = {
                n: replace(p, path=os.path.relpath(p.path, workdir)) for n, p in probes.items()
            }
        dtypes = settings.get("dtypes", PROBE_DTYPES)
        configured = versions.configured(config)
        releases = {fw: vs[1:] for fw, vs in configured.items() if vs[1:]}
        primaries = {fw: vs[0] for fw, vs in configured.items()}
        source_ids = runner_source_ids(config, configured, config["devices"]) if probes else {}
        return cls(
            probes,
            config["devices"],
            dtypes,
            settings.get("fp64_rule"),
            releases,
            primaries,
            source_ids,
        )

    def for_devices(self, devices: Sequence[str]) -> ProbePlan:
        """The same probes, dtypes and rule on ``devices`` only (a per-device target; the
        reference runs on the CPU stay cells)."""
        return ProbePlan(
            self.probes,
            devices,
            self.dtypes,
            self.fp64_rule,
            self.releases,
            self.primaries,
            self.source_ids,
        )

    def to_params(self) -> dict:
        """Plain data for a job's ``params`` (see :meth:`from_params`)."""
        return {
            "probes": {n: p.as_params() for n, p in self.probes.items()},
            "devices": self.devices,
            "dtypes": self.dtypes,
            "fp64_rule": self.fp64_rule,
            "releases": self.releases,
            "primaries": self.primaries,
            "source_ids": self.source_ids,
        }

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> ProbePlan:
        """The plan :meth:`to_params` described."""
        probes = {n: Probe(**p) for n, p in params["probes"].items()}
        return cls(
            probes,
            params["devices"],
            params["dtypes"],
            params.get("fp64_rule"),
            params.get("releases"),
            params.get("primaries"),
            params.get("source_ids"),
        )

    def probe(self, name: str) -> Probe:
        """A probe by name. Raises ``KeyError``."""
        return self.probes[name]

    def path(self, name: str) -> str:
        """The probe's file."""
        return self.probes[name].path

    def cells(self) -> list[ProbeKey]:
        """Every (probe, framework, dtype, device) the table shows: the configured devices
        and dtypes, plus the reference runs on the CPU: PyTorch in each dtype, and PyTorch
        in float64 (:attr:`ProbeKey.reference64`) whenever any dtype runs, also when
        ``f64`` is not configured; each further release's cells beside its framework's.
        Unsupported cells included."""
        out = set()
        for p in self.probes:
            for dtype in self.dtypes:
                for device in self.devices:
                    for fw in PROBE_FRAMEWORKS:
                        out.add(ProbeKey(p, fw, dtype, device))
                        for v in self.releases.get(fw, ()):
                            out.add(ProbeKey(p, fw, dtype, device, v))
                out.add(ProbeKey(p, REFERENCE_FRAMEWORK, dtype, REFERENCE_DEVICE))
            if self.dtypes:
                out.add(ProbeKey(p, REFERENCE_FRAMEWORK, REFERENCE64_DTYPE, REFERENCE_DEVICE))
        return sorted(out, key=_cell_order)

    def jobs(self) -> list[ProbeKey]:
        """The cells that run (see :func:`frameworks.probe_unsupported_reason`)."""
        return [k for k in self.cells() if self.unsupported(k) is None]

    @staticmethod
    def unsupported(key: ProbeKey) -> str | None:
        """Why a cell cannot run (the probes' validity matrix, with half precision), or
        None."""
        return probe_unsupported_reason(key.framework, key.device, key.dtype)

    def batches(self) -> dict[tuple[str, str, str], list[ProbeKey]]:
        """The cells that run (:meth:`jobs`) grouped by (runner, dtype, device), the runner
        being the framework or a further release (:attr:`ProbeKey.runner`): one probe job
        per batch runs them all in one process (``parity.probe.batch``), the keys in
        :meth:`jobs` order (by probe name)."""
        out: dict[tuple[str, str, str], list[ProbeKey]] = {}
        for k in self.jobs():
            out.setdefault((k.runner, k.dtype, k.device), []).append(k)
        return out

    def source_id(self, key: ProbeKey) -> str | None:
        """The source id this checkout and config build for the Rust runner that makes
        ``key``'s result (its release, its device without a host), which the result's
        recorded ``runner.source_id`` must be; None for PyTorch."""
        if key.framework not in frameworks.RUST_FRAMEWORKS:
            return None
        return self.source_ids.get(build_key(key.framework, self.version_of(key), key.base_device))

    def version_of(self, key: ProbeKey) -> str:
        """The release of a Rust framework that makes ``key``'s result: its ``version``, or
        the framework's primary release; "" for PyTorch."""
        return key.version or self.primaries.get(key.framework, "")

    def release_of(self, runner: str) -> tuple[str, str]:
        """(framework, version) of a runner name (``candle_v0_11_1`` → ``("candle",
        "0.11.1")``; a framework's own name → (it, "")). Raises ``KeyError``."""
        for fw in PROBE_FRAMEWORKS:
            if runner == fw:
                return fw, ""
            for v in self.releases.get(fw, ()):
                if runner == fw + versions.suffix(v):
                    return fw, v
        raise KeyError(f"no probe runner {runner!r}")

    def results(self) -> list[str]:
        """Every result file the table reads."""
        return [k.result for k in self.jobs()]

    def outputs(self) -> list[str]:
        """Targets of the default rule: the table and its Markdown twin (none when disabled)."""
        return [paths.PROBES_TABLE.format(ext=e) for e in ("csv", "md")] if self.probes else []


def _cell_order(k: ProbeKey) -> tuple:
    return (
        k.probe,
        PROBE_DTYPES.index(k.dtype),
        DEVICES.index(k.device),
        PROBE_FRAMEWORKS.index(k.framework),
        k.version,
    )
