"""The fuzz job (rule ``fuzz``, config block ``fuzz``): one layout-fuzzing campaign
(``campaign.campaign``) and everything it writes, each output published atomically like
every other job's (``fileio.atomic_path``, ``fileio.atomic_dir``): the findings table (CSV
and Markdown), the folder of probe files and the folder of reproductions (each replaced
whole, so no file of an earlier campaign survives in it), the summary, and last the sealed
record of every file it wrote (``integrity.write_record``, as ``parity.report.sealed``
seals a page; page ``fuzz``), which ``check`` holds them to.
``scripts/fuzz.py`` is a thin adapter; tests call :func:`fuzz` directly.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import platform
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from parity.core import integrity
from parity.core.fileio import atomic_dir, write_text_atomic
from parity.fuzz import campaign, check
from parity.fuzz.campaign import Campaign
from parity.fuzz.generate import dump
from parity.fuzz.report import (
    COLUMNS,
    classify,
    known_bug_cases,
    layout_text,
    markdown,
    probe_doc,
    probe_name,
    releases_of,
    values_text,
)
from parity.fuzz.repro import candle_source
from parity.fuzz.repro_burn import burn_source
from parity.probe import loader

#: What the job writes, by the rule's output names.
OUTPUTS = ("csv", "md", "summary", "probes", "repro", "record")


def written_files(outputs: Mapping[str, str]) -> dict[str, str]:
    """kind → path of every file a campaign wrote under ``outputs`` (:data:`OUTPUTS`): the
    tables, the summary, and each probe file and reproduction (``probe:<name>``,
    ``repro:<name>``), for its sealed record."""
    out = {k: str(outputs[k]) for k in ("csv", "md", "summary")}
    for kind in ("probes", "repro"):
        for f in sorted(Path(outputs[kind]).iterdir()):
            out[f"{kind}:{f.name}"] = str(f)
    return out


def write_findings(
    result: Campaign,
    seed: int,
    known: str | Path | Sequence[str | Path],
    csv_path: str | Path,
    md_path: str | Path,
    probe_dir: str | Path,
    repro_dir: str | Path,
    settings: Mapping,
    limits: Mapping | None = None,
) -> list[dict]:
    """Write the findings table (``csv_path``, ``md_path``), one probe file per finding in
    ``probe_dir`` and one reproduction per finding in ``repro_dir``, each folder replaced
    whole and every file atomically; returns the table rows (:data:`report.COLUMNS`, the
    ``probe`` and ``repro`` cells naming the files where they end up). ``known``: the probes
    whose ``known_bug`` entries findings are matched with (a folder or a list of probe
    files), each finding with the entries that name its release (``report.classify``;
    ``settings["releases"]``, framework → the releases run, go into the probe files'
    ``versions``). The known probes are read within ``limits`` (the config's,
    ``parity.plan.limits.settings``; default its defaults), as the probe plan reads them.
    Every probe file is read back with ``loader.load`` (a ``ProbeError`` is a bug here,
    and nothing is published then)."""
    probe_dir, repro_dir = Path(probe_dir), Path(repro_dir)
    known = known_bug_cases(known, limits=limits)
    ran = {fw: releases_of(settings, fw) for fw in settings.get("frameworks", [])}
    rows = []
    with atomic_dir(probe_dir) as probe_tmp, atomic_dir(repro_dir) as repro_tmp:
        for i, f in enumerate(result.findings):
            name = probe_name(f, i)
            doc, header = probe_doc(f, name, seed, ran)
            written = probe_tmp / f"{name}.yaml"
            written.write_text(header + dump(doc), encoding="utf-8")
            loader.load(written)
            src = candle_source(f, name) if f.framework == "candle" else burn_source(f, name)
            torch_lines = "".join(
                f"// PyTorch {x.dtype}: {x.quantity} = {values_text(x.reference)}\n"
                f"// {f.framework} {f.release} {x.dtype}: {x.quantity} = "
                f"{values_text(x.values) if x.values else x.message}\n"
                for x in f.failures
            )
            (repro_tmp / f"{name}.rs").write_text(torch_lines + src, encoding="utf-8")
            same, related = classify(f, known)
            rows.append(
                {
                    "op": f.op,
                    "framework": f.framework,
                    "release": f.release,
                    "dtype": f.dtype,
                    "kind": f.kind,
                    "layout": layout_text(f),
                    "quantities": " ".join(x.quantity for x in f.failures),
                    "shapes": " ".join(str(list(x.shape)) for x in f.case.inputs),
                    "args": " ".join(f"{k}={v}" for k, v in f.case.args.items()),
                    "failing_cases": result.failing_by_signature.get(
                        (f.op, f.framework, f.release, f.dtype, f.kind), 0
                    ),
                    "sources": " ".join(f.sources),
                    "known_bug": " ".join(same) or "new",
                    "related": " ".join(related),
                    "probe": str(probe_dir / f"{name}.yaml"),
                    "repro": str(repro_dir / f"{name}.rs"),
                    "note": f.failures[0].message[:200],
                }
            )
    table = io.StringIO(newline="")
    w = csv.DictWriter(table, COLUMNS)
    w.writeheader()
    w.writerows(rows)
    write_text_atomic(csv_path, table.getvalue())
    write_text_atomic(md_path, markdown(rows, result, seed, settings))
    return rows


def targets(settings: Mapping) -> list[check.Target]:
    """Every (framework, release) a campaign runs: each framework of
    ``settings["frameworks"]`` at each of its ``settings["releases"]`` (in order), or
    without a release where none are named."""
    return [
        check.Target(fw, r)
        for fw in settings["frameworks"]
        for r in (releases_of(settings, fw) or [""])
    ]


def fuzz(
    settings: Mapping,
    binaries: Sequence[str],
    known: Sequence[str],
    outputs: Mapping[str, str],
    threads: int,
    log: logging.Logger,
    log_path: str | None = None,
    seal: Mapping | None = None,
    limits: Mapping | None = None,
    builds: Sequence[Mapping[str, str] | None] | None = None,
) -> dict:
    """Run one campaign and write what it found.

    ``settings`` is the rule's ``fuzz`` param (config ``fuzz`` resolved: ``seed``, ``ops``,
    ``cases_per_op``, ``frameworks``, ``dtypes``, ``shrinks_per_class``, ``releases``:
    framework → the releases to run, default none named); ``binaries`` the Rust runners,
    one per (framework, release) of :func:`targets`, in its order; ``known`` the probe
    files whose known bugs findings are matched with;
    ``outputs`` the paths of :data:`OUTPUTS` (the findings table's CSV and Markdown, the
    summary JSON, the probe-file and reproduction folders); ``log_path`` the runners' log.
    The summary (``settings``, case counts, findings and new ones, findings per framework
    release, the control's failing quantities per case, wall times in seconds, threads,
    machine) is written after the files; then, given ``seal`` (the rule's page spec,
    ``sealed.page_spec``), the record at ``outputs["record"]`` of every file written, the
    inputs' sha256 taken before the campaign read them, its settings and code. Returns the
    summary. The known-bug probes are read within ``limits`` (the config's,
    ``parity.plan.limits.settings``; default its defaults). Raises what the runners raise
    (``probe.rust.RunnerError``), and ``ValueError`` when ``binaries`` do not match the
    targets; nothing is written then.

    ``builds`` (the rule's param, one per binary in its order) are the identities each
    binary's build record must hold (``binary``, ``source_id``: its release's build of this
    checkout and config, ``parity.plan.builds``): every binary is held to its own before
    the campaign starts, so another release's binary copied in with its record raises
    ``RunnerError`` naming both builds, and no finding is credited to the wrong release.
    """
    runs = targets(settings)
    binary_of = dict(zip(runs, binaries, strict=True))
    build_of = dict(zip(runs, builds, strict=True)) if builds is not None else {}
    if runs:
        from parity.train.rust import check_binary

        for run in runs:  # each held to its own release's build, before any case runs
            check_binary(binary_of[run], build_of.get(run))
    runners = check.Runners(binary_of, threads, log, log_path, build_of)
    made_from = {str(p): integrity.file_record(p) for p in (*binaries, *known)} if seal else {}
    t0 = time.monotonic()
    result = campaign.campaign(
        settings["seed"],
        settings["ops"],
        settings["cases_per_op"],
        runs,
        settings["dtypes"],
        runners,
        shrinks_per_class=settings["shrinks_per_class"],
    )
    rows = write_findings(
        result,
        settings["seed"],
        list(known),
        outputs["csv"],
        outputs["md"],
        outputs["probes"],
        outputs["repro"],
        settings,
        limits,
    )
    summary = {
        "settings": settings,
        "cases": result.cases,
        "failing_cases": result.failing_cases,
        "findings": len(rows),
        "new": sum(1 for r in rows if r["known_bug"] == "new"),
        "findings_by_release": {
            t.label(): sum(1 for r in rows if (r["framework"], r["release"]) == tuple(t))
            for t in runs
        },
        "control_failures": {
            n: [f.quantity for f in v] for n, v in result.control_failures.items()
        },
        "seconds": {**result.seconds, "job": time.monotonic() - t0},
        "threads": threads,
        "machine": f"{platform.machine()}, {platform.processor() or platform.node()}",
    }
    write_text_atomic(outputs["summary"], json.dumps(summary, indent=2))
    if seal is not None:
        integrity.write_record(
            outputs["record"],
            seal["page"],
            made_from,
            written_files(outputs),
            params_sha256=seal["params_sha256"],
            code=seal["code"],
        )
    log.info(
        "%d findings (%d new); control: %d failing cases",
        len(rows),
        summary["new"],
        len(result.control_failures),
    )
    return summary
