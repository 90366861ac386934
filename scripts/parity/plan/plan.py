"""The plan: ``config.yaml`` resolved into run jobs and comparisons, and the queries the
rules ask of it.

``rules/common.smk`` builds one :class:`Plan` while the DAG is built (after JSON-schema
validation); every rule's inputs come from it, and every job receives what it needs from
it as params (``Plan.run_settings``, :meth:`Plan.comparison_job`, …): no adapter builds
a plan of its own.

Run keys and comparisons are :mod:`parity.plan.keys`.

Pure Python: importing this must stay cheap.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

from parity.core import paths
from parity.core.config import (
    DIAGNOSIS_DEFAULTS,
    LOCALISE_DEFAULTS,
    ConfigError,
    canonical_hash,
    merge,
)
from parity.core.devices import DEVICES
from parity.core.models import model_params
from parity.plan import builds, frameworks, versions
from parity.plan.faults import resolve_fault, resolve_sensitivity
from parity.plan.keys import Comparison, RunKey, trace_expectation
from parity.plan.loop import replay_limits
from parity.plan.references import reference_problems
from parity.plan.resolve import resolve_experiment


class Plan:
    """The resolved config: which jobs run and what each compares.

    Construct from a config dict that already passed ``schemas/config.schema.yaml``; raises
    :class:`ConfigError` for what a JSON schema cannot express (a comparison naming a run
    that does not exist, an optimizer a framework lacks, shapes that do not fit), every
    problem of the experiments at once. ``workdir`` is the working directory (default: the
    current one) that an own model's factory file, crate paths and kept model card are
    relative to (:mod:`parity.plan.own`).
    """

    def __init__(self, config: Mapping[str, Any], workdir: str | None = None):
        self.config = copy.deepcopy(dict(config))
        self.workdir = workdir or os.getcwd()
        self.devices: list[str] = list(self.config["devices"])
        self.dtypes: list[str] = list(self.config["dtypes"])
        self.reference_device: str = self.config.get("reference_device", "cpu")
        self.tolerance: float = float(self.config["tolerance"])
        self.diagnosis: dict = merge(DIAGNOSIS_DEFAULTS, self.config.get("diagnosis", {}))
        self.localise: dict = merge(LOCALISE_DEFAULTS, self.config.get("localise", {}))
        self.experiments: dict[str, dict] = {}
        self._comparisons: dict[tuple, list[Comparison]] = {}
        #: (experiment, tag) → comparison on any device (:meth:`comparison`), made once.
        self._by_tag: dict[tuple[str, str], Comparison] | None = None
        #: comparison_job's answers: a comparison's compare and localise jobs ask for the
        #: same params, on every DAG build.
        self._jobs: dict[Comparison, dict] = {}
        #: build_identity's answers by binary: each hashes a runner's sources once.
        self._identities: dict[str, dict[str, str] | None] = {}
        self.imported_devices: list[str] = list(self.config.get("imported_devices", []))
        problems: list[ConfigError] = reference_problems(self.config)
        only = self.config.get("only")
        for name, exp in self.config["experiments"].items():
            if only is not None and name not in only:
                continue
            if exp.get("enabled", True):
                try:
                    self.experiments[name] = resolve_experiment(
                        name, exp, self.config, self.workdir
                    )
                except ConfigError as e:
                    problems.extend(e.problems)
        if problems:
            raise ConfigError.every(problems)
        #: Fault instances by name (``faults.resolve_fault``), their runs and comparisons by
        #: experiment; none of them is in :meth:`runs` or :meth:`comparisons`.
        self.faults: dict[str, dict] = {}
        #: Instances left out, with the reason: their experiment is not configured (a config
        #: that selects some experiments) or disabled.
        self.faults_left_out: dict[str, str] = {}
        self._fault_runs: dict[str, dict[str, dict]] = {}
        self._fault_comparisons: dict[str, dict[str, dict]] = {}
        faults = self.config.get("faults", {})
        for name, inst in faults.get("instances", {}).items():
            resolved = resolve_fault(name, inst, self.config, self.experiments)
            if isinstance(resolved, str):
                self.faults_left_out[name] = resolved
                continue
            record, settings, spec = resolved
            e = record["experiment"]
            self._fault_runs.setdefault(e, {})[record["run"]] = settings
            self._fault_comparisons.setdefault(e, {})[record["comparison"]] = spec
            self.faults[name] = record
        self.sensitivity: dict | None = None
        if "sensitivity" in faults:
            self.sensitivity = resolve_sensitivity(
                faults["sensitivity"], self.config, self.experiments
            )

    # ----- runs ----------------------------------------------------------------------

    def run_settings(self, experiment: str, run: str) -> dict:
        """Resolved settings of a run (a fault instance's run too): framework, model, loss,
        data, steps, record, optimizer, framework options and ``fault`` when it has one.
        Raises ``KeyError`` for an unknown run."""
        return copy.deepcopy(self._settings(experiment, run))

    def _settings(self, experiment: str, run: str) -> dict:
        """:meth:`run_settings` without the copy, for the plan's own read-only uses (the
        DAG asks for them thousands of times; a deep copy each time was a fifth of a no-op
        rerun). Nothing may change the dict returned."""
        runs = self.experiments[experiment]["runs"]
        if run in runs:
            return runs[run]
        return self._fault_runs.get(experiment, {})[run]

    def config_hash(self, experiment: str, run: str) -> str:
        """Hash of everything that defines the computation of a run (not dtype/device)."""
        return canonical_hash(self._settings(experiment, run))

    def fixture_settings(self, experiment: str) -> dict:
        """What the fixture depends on: model, loss and data."""
        exp = self.experiments[experiment]
        return {"model": exp["model"], "loss": exp["loss"], "data": exp["data"]}

    def fixture(self, experiment: str) -> str:
        """Path of an experiment's fixture."""
        return paths.FIXTURE.format(experiment=experiment)

    def unsupported_reason(self, key: RunKey) -> str | None:
        """Why run ``key`` cannot run: a cell of the validity matrix (float64 on Metal), or a
        dtype the run's own settings exclude (``unsupported``: a candle run with a fused op
        that has no float64 kernel); None when it can."""
        reason = frameworks.unsupported_reason(key.framework, key.device, key.dtype)
        if reason is None:
            settings = self._settings(key.experiment, key.run)
            reason = settings.get("unsupported", {}).get(key.dtype)
        return reason

    def supported(self, key: RunKey) -> bool:
        """Whether this run can run (:meth:`unsupported_reason`)."""
        return self.unsupported_reason(key) is None

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
            keys.update(c.keys.values())
        return sorted(k for k in keys if self.supported(k))

    def binary(self, key: RunKey) -> str:
        """The runner binary a Rust run's job starts: its release's build for its device
        (``versions.run_binary``). Raises ``KeyError`` for a PyTorch run."""
        return versions.run_binary(self._settings(key.experiment, key.run), key.device)

    def build_identity(self, key: RunKey) -> dict[str, str] | None:
        """What the binary a Rust run's job starts (:meth:`binary`) must be, as this checkout
        and config build it (``builds.run_identity``): its file name and source id, which
        the job holds the binary's build record to (``integrity.check_binary``); None for a
        PyTorch run. Raises ``OSError`` when a file the build reads cannot be read."""
        settings = self._settings(key.experiment, key.run)
        if settings["framework"] not in frameworks.RUST_FRAMEWORKS:
            return None
        binary = versions.run_binary(settings, key.device)
        if binary not in self._identities:
            self._identities[binary] = builds.run_identity(
                self.config, settings, key.experiment, key.device
            )
        return self._identities[binary]

    def trace_expectation(self, key: RunKey) -> dict:
        """What a trace of ``key`` must carry (:func:`trace_expectation`), and for a Rust
        run the source id of the build that must have made it (``runner_source_id``:
        :meth:`build_identity`), so a trace another build made (another release, backend,
        own port or checkout, its binary copied in with its record) is refused by the
        comparison that reads it."""
        out = trace_expectation(key, self._settings(key.experiment, key.run))
        identity = self.build_identity(key)
        if identity is not None:
            out["runner_source_id"] = identity["source_id"]
        return out

    def sensitivity_params(self) -> dict | None:
        """What the sensitivity job receives (config ``faults.sensitivity``, None when it is
        not set): the resolved setting (``faults.resolve_sensitivity``) with ``build``, the
        identity of the binary its perturbed runs start on the CPU (``builds.run_identity``;
        None for PyTorch), and ``reference_expectation``, the full expectation of the clean
        run's float32 CPU trace it reads (:meth:`trace_expectation`, with the runner source
        id of a Rust run), so another build's binary or trace is refused there as in the
        training job and the comparison. Raises ``OSError`` when a file the build reads
        cannot be read."""
        s = self.sensitivity
        if s is None:
            return None
        e = s["experiment"]
        return {
            **s,
            "build": builds.run_identity(self.config, s["settings"], e, "cpu"),
            "reference_expectation": self.trace_expectation(RunKey(e, s["against"], "f32", "cpu")),
        }

    def unsupported_cells(self) -> list[tuple[RunKey, str]]:
        """Runs of the configured devices and dtypes that the validity matrix excludes,
        with the reason; the summary lists them with verdict ``unsupported``."""
        cells = []
        for e, exp in self.experiments.items():
            for r in exp["runs"]:
                for dt in self.dtypes:
                    for dev in self.devices:
                        key = RunKey(e, r, dt, dev)
                        reason = self.unsupported_reason(key)
                        if reason:
                            cells.append((key, reason))
        return cells

    # ----- comparisons ---------------------------------------------------------------

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
        other._by_tag = None
        other._jobs = {}
        return other

    def local_devices(self) -> list[str]:
        """Devices whose runs this host makes (every device but the imported ones)."""
        return [d for d in DEVICES if d not in self.imported_devices]

    def _pair_key(self, experiment: str, run: str, dtype: str, device: str) -> RunKey:
        key = RunKey(experiment, run, dtype, device)
        if not key.supported:
            # A float64 run on a device without float64 is taken from the CPU.
            key = RunKey(experiment, run, dtype, "cpu")
        return key

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
                        if not all(map(self.supported, f64)):
                            f64 = None  # a run without float64 (a fused candle op)
                    out.append(
                        Comparison(e, name, dev, ref, cand, comp["expect"], comp["tolerance"], f64)
                    )
        return out

    def _comparison_table(self) -> dict[tuple[str, str], Comparison]:
        """Every comparison by (experiment, file-name tag), on every device, fault
        instances' too; made once."""
        if self._by_tag is None:
            # First match wins, as a scan of the two lists in this order would find it.
            self._by_tag = {}
            for c in self.comparisons(DEVICES) + self.fault_comparisons(DEVICES):
                self._by_tag.setdefault((c.experiment, c.tag), c)
        return self._by_tag

    def comparison(self, experiment: str, tag: str) -> Comparison:
        """The comparison with this file-name tag, on any device (per-device targets may
        ask for devices the config does not list), fault instances' too. Raises ``KeyError``
        if none."""
        try:
            return self._comparison_table()[experiment, tag]
        except KeyError:
            raise KeyError(f"no comparison {tag!r} in experiment {experiment!r}") from None

    def float32_only(self) -> list[Comparison]:
        """The comparisons :meth:`comparison` finds that have no float64 runs (a run with
        no float64, such as candle's fused norm): only their per-step table is made, by
        rule ``perstep``; every other comparison's three tables are one ``compare`` job."""
        return [c for c in self._comparison_table().values() if c.f64_pair is None]

    def comparison_job(self, c: Comparison) -> dict:
        """What a comparison job needs besides its input files, as plain data (a rule's
        params, so a change reruns it): the comparison, what each of its traces must carry
        (by role, :attr:`Comparison.keys`), the reference run's model (the diagnosis
        counts ReLU units) and the diagnosis settings. Made once per comparison and shared:
        the caller must not change it."""
        if c in self._jobs:
            return self._jobs[c]
        self._jobs[c] = job = {
            "comparison": c.to_params(),
            "expectations": {role: self.trace_expectation(k) for role, k in c.keys.items()},
            "model": self.run_settings(c.experiment, c.reference.run)["model"],
            "diagnosis": self.diagnosis,
            "localise": self.localise_params(c),
        }
        return job

    def replay_keys(self, c: Comparison) -> dict[str, RunKey]:
        """The replays of a localisation by role (``ref32``, ``cand32``, ``ref64``,
        ``cand64``): the comparison's runs in float32 and float64, a float64 replay on the
        CPU where the device has no float64 (as the float64 runs); no float64 roles when
        either run has no float64 at all (a fused candle op)."""
        ref, cand = c.reference, c.candidate
        keys = {
            "ref32": RunKey(ref.experiment, ref.run, "f32", ref.device),
            "cand32": RunKey(cand.experiment, cand.run, "f32", cand.device),
            "ref64": self._pair_key(ref.experiment, ref.run, "f64", ref.device),
            "cand64": self._pair_key(cand.experiment, cand.run, "f64", cand.device),
        }
        if not (self.supported(keys["ref64"]) and self.supported(keys["cand64"])):
            del keys["ref64"], keys["cand64"]
        return keys

    def localise_params(self, c: Comparison) -> dict:
        """What a localisation job needs (``parity.localise.replay``): config ``localise``, each
        run's settings, the replays' keys and the identity of each one's binary
        (:meth:`build_identity`, which its build record must hold), the fixture, threads and
        batch size, and why it cannot replay here (a run on an imported device), or None."""
        keys = self.replay_keys(c)
        imported = sorted({k.device for k in keys.values()} & set(self.imported_devices))
        no_f64 = [
            f"{k.label}: {self.unsupported_reason(k)}"
            for k in (
                RunKey(c.reference.experiment, c.reference.run, "f64", "cpu"),
                RunKey(c.candidate.experiment, c.candidate.run, "f64", "cpu"),
            )
            if "ref64" not in keys and self.unsupported_reason(k)
        ]
        runs = {c.reference.run, c.candidate.run}
        data = self._settings(c.experiment, c.reference.run)["data"]
        loop_why, loop_groups = replay_limits(
            {r: self._settings(c.experiment, r) for r in sorted(runs)},
            lambda: [n for n, _ in model_params(self.experiments[c.experiment]["model"])],
        )
        unreplayable = loop_why
        if imported:
            unreplayable = (
                f"device {', '.join(imported)} is imported: its runs cannot be replayed here"
            )
        return {
            **self.localise,
            "settings": {r: self.run_settings(c.experiment, r) for r in sorted(runs)},
            "replays": {role: asdict(k) for role, k in keys.items()},
            # what each replay's binary must be (build_identity; None for PyTorch)
            "builds": {role: self.build_identity(k) for role, k in keys.items()},
            "fixture": self.fixture(c.experiment),
            "threads": int(self.config.get("threads", 1)),
            "batch_size": int(data["batch_size"]),
            "no_f64": "; ".join(no_f64) or None,
            "unreplayable": unreplayable,
            # the groups of each run that cannot be replayed: an update that differs is named
            # by its group (parity.localise.job, update_culprit)
            "loop_groups": loop_groups,
        }

    # ----- tables over many comparisons ----------------------------------------------

    def framework_summary_rows(self) -> list[dict]:
        """The study's "burn vs PyTorch | candle vs PyTorch" table, as configured
        (``framework_summary``): per row the experiment, its label, its steps and, for each
        framework, the comparison of that framework's run against the ``torch`` run on the
        CPU (None when no such run is configured)."""
        rows = []
        for item in self.config.get("framework_summary", []):
            e = item["experiment"]
            if e not in self.experiments:
                continue
            cells = {}
            for fw in frameworks.FRAMEWORKS[1:]:
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
            rows.append(
                {
                    "experiment": e,
                    "label": item["label"],
                    "steps": self.experiments[e]["steps"],
                    "comparisons": cells,
                }
            )
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

    # ----- what the jobs over many comparisons receive (plain data for params) --------

    def unsupported_params(self) -> list[dict]:
        """The validity matrix's excluded cells (:meth:`unsupported_cells`) as plain data
        for the summary job: ``experiment``, ``device``, ``label``, ``reason``."""
        return [
            {"experiment": k.experiment, "device": k.device, "label": k.label, "reason": reason}
            for k, reason in self.unsupported_cells()
        ]

    def framework_summary_params(self) -> list[dict]:
        """The framework table's rows as plain data for its job: per configured experiment
        its label, steps and, per framework, the result files of its comparison with the
        ``torch`` run on the CPU (None: not run)."""
        return [
            {
                "experiment": item["experiment"],
                "label": item["label"],
                "steps": item["steps"],
                "results": {
                    fw: None
                    if c is None
                    else {
                        "perstep": c.result("perstep"),
                        "split": c.result("split") if c.f64_pair is not None else None,
                    }
                    for fw, c in item["comparisons"].items()
                },
            }
            for item in self.framework_summary_rows()
        ]

    def detection_params(self) -> dict:
        """What the detection job needs, as plain data: each fault comparison with its
        fault instance, the correct pairs, the instances left out and why, and the
        tolerance."""
        faults = {(f["experiment"], f["comparison"]): f for f in self.faults.values()}
        return {
            "faults": [
                {"fault": faults[(c.experiment, c.name)], "comparison": c.to_params()}
                for c in self.fault_comparisons()
            ],
            "correct_pairs": [c.to_params() for c in self.correct_pairs()],
            "left_out": dict(self.faults_left_out),
            "tolerance": self.tolerance,
        }

    def detection_inputs(self) -> list[str]:
        """The result files the detection job reads: every fault comparison's and every
        correct pair's."""
        comps = self.fault_comparisons() + self.correct_pairs()
        return [c.result(k) for c in comps for k in c.kinds]
