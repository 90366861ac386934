"""Sealed records of the pages a person reads that one job makes from a few files: the
provenance table, the framework table, the optimizer defaults, the release matrix, the
report's training-loop page and the index of ``results/`` (:data:`PAGES`). ``check`` holds
each page to its record, and the record to the current config, code and plan
(:func:`page_problems`).

A page's job takes the sha256 of every input before it reads it (:func:`read_inputs`),
writes its files, then its record (:func:`seal_page`: ``integrity.write_record``, sealed
JSON written atomically): the run, each input's path and sha256, the sha256 of every file
it wrote (CSV, Markdown, HTML), the hash of its params (``params_sha256``, the canonical
JSON of what the rule gave it) and its code hash. The rule gives the job its
:func:`page_spec`, which the check job resolves again from the current config.

The pages of a target outside the default one (:data:`OTHER_PAGES`: the fuzz campaign's
findings, probe files and reproductions) are sealed the same way; ``check`` holds them to
their record and the current config too, but warns rather than refuses
(:func:`other_page_warnings`): its own target does not make them, and a run of the default
target must not fail for want of a 70-minute campaign.

What ``check`` cannot vouch for is said too (:func:`unverified`): a file a person reads
under ``results/`` that no record it holds covers (Snakemake's own ``--report``, which
no job makes; the ``faults`` target's tables; a table an earlier config left). Every
folder of ``results/`` is either read by people (:data:`READ_DIRS`) or machine data
(:data:`MACHINE_DIRS`, each with why); ``tests/test_integrity.py`` holds every folder the
workflow writes to one of the two.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from parity.core import integrity, paths
from parity.core.config import canonical_hash

#: The sealed pages: name → (the file named in messages, its record). The record of a
#: table lies beside it (``provenance.sources.json``), the page's beside the page.
PAGES = {
    "provenance": (paths.PROVENANCE.format(ext="csv"), paths.PROVENANCE_SOURCES),
    "framework_summary": (
        paths.FRAMEWORK_SUMMARY.format(ext="csv"),
        paths.FRAMEWORK_SUMMARY_SOURCES,
    ),
    "optimizer_defaults": (
        paths.OPTIMIZER_DEFAULTS.format(ext="csv"),
        paths.OPTIMIZER_DEFAULTS_SOURCES,
    ),
    "versions": (paths.VERSIONS_TABLE.format(ext="csv"), paths.VERSIONS_TABLE_SOURCES),
    "training_loop": (paths.TRAINING_LOOP_PAGE, paths.TRAINING_LOOP_SOURCES),
    "index": (paths.INDEX, paths.INDEX_SOURCES),
}

#: Sealed pages of targets other than the default one: name → (the file named in
#: messages, its record, the folder it fills, the target that makes it).
OTHER_PAGES = {
    "fuzz": (paths.FUZZ_FINDINGS.format(ext="csv"), paths.FUZZ_SOURCES, "results/fuzz", "fuzz"),
}


def page_files(page: str) -> tuple[str, str]:
    """(the file named in messages, its record) of sealed page ``page`` (of :data:`PAGES`
    or :data:`OTHER_PAGES`). Raises KeyError for an unknown page."""
    return PAGES[page] if page in PAGES else OTHER_PAGES[page][:2]


#: Each framework's optimizer defaults as it prints them: what the defaults table and the
#: training-loop page are made from (those :func:`defaults_json` keeps).
DEFAULTS_FRAMEWORKS = ("torch", "candle", "burn")
DEFAULTS_JSON = tuple(f"results/defaults/{fw}.json" for fw in DEFAULTS_FRAMEWORKS)


def defaults_json(plan) -> list[str]:
    """The optimizer defaults the table and the training-loop page show for ``plan`` (a
    ``parity.plan.plan.Plan``): PyTorch's, and each Rust framework's that one of its runs
    uses. Each Rust framework's printout needs its runner built, so a user's candle port
    alone builds no burn for a column about a framework it does not run."""
    used = {"torch"} | {k.framework for k in plan.runs()}
    return [p for fw, p in zip(DEFAULTS_FRAMEWORKS, DEFAULTS_JSON, strict=True) if fw in used]


#: The adapter of each page (under ``scripts/``): its rule's code hash is of it.
SCRIPTS = {
    "provenance": "provenance.py",
    "framework_summary": "framework_summary.py",
    "optimizer_defaults": "optimizer_defaults.py",
    "versions": "versions_table.py",
    "training_loop": "training_loop_page.py",
    "index": "index.py",
}

#: Where the files a person reads lie, and what they end with (:func:`unverified`): the
#: fuzz campaign's folder holds its summary, probe files and reproductions too.
READ_SUFFIXES = (".csv", ".md", ".html", ".png", ".svg")
READ_DIRS = {
    "results/tables": READ_SUFFIXES,
    "results/figures": READ_SUFFIXES,
    "results/report": READ_SUFFIXES,
    "results/fuzz": (*READ_SUFFIXES, ".json", ".yaml", ".rs"),
}
#: The folders of ``results/`` no person is meant to read, and why: each file there is
#: read by a later job that checks it (a trace's seal, a result's sha256), or is a log.
MACHINE_DIRS = {
    "results/traces": "traces: sealed Parquet, checked by every reader",
    "results/fixtures": "fixtures: safetensors with the sha256 of their tensors",
    "results/compare": "comparison results: sealed JSON, read by the summary and check",
    "results/probes": "probe results: sealed Parquet, read by the probe table",
    "results/defaults": "the frameworks' optimizer defaults, read by the sealed pages",
    "results/bin": "runner binaries, each checked against its build record",
    "results/own": "own-model runner crates and own_check results",
    "results/remote": "what a remote host sent, checked by the fetch and cross-host jobs",
    "results/cache": "the warm runners' and probes' caches",
    "results/logs": "job logs",
    "results/benchmarks": "Snakemake's benchmark: files",
}
#: Files a person reads outside :data:`READ_DIRS`: the index of ``results/``.
READ_FILES = (paths.INDEX,)
#: Snakemake's own report (``snakemake --report results/report.html``): made by Snakemake
#: from the files above, not by a job, so no record can hold its sha256.
SNAKEMAKE_REPORT = ("results/report.html", "results/report.zip")


def page_spec(page: str, inputs: Sequence[str], params: Any, code: str | None) -> dict:
    """What a page's job records and ``check`` holds its record to, as plain data (a
    rule's param): ``page`` (a key of :data:`PAGES`), its ``record`` path, the ``inputs``
    (paths, as the rule's input names them), ``params_sha256`` (canonical JSON hash of
    ``params``, the job's other params; None hashes as ``null``) and ``code`` (the rule's
    code hash). Raises KeyError for an unknown page."""
    return {
        "page": page,
        "record": page_files(page)[1],
        "inputs": sorted(str(p) for p in inputs),
        "params_sha256": canonical_hash(params),
        "code": code,
    }


def page_inputs(page: str, plan, probe_plan, text: str) -> list[str]:
    """The files ``page`` is made from, as its rule's input names them: every trace of
    ``plan`` (a ``parity.plan.plan.Plan``) for the provenance, the comparison results the
    framework table reads, the frameworks' defaults (:func:`defaults_json`), the summary
    and with probes (``probe_plan``, None without) the probe table for the release matrix,
    our text ``text`` (``report/training_loop.rst``, relative to the working directory)
    and the defaults for the training-loop page, the summary, its record and with probes
    the probe table for the index. Raises KeyError for an unknown page."""
    return {
        "provenance": lambda: [k.trace for k in plan.runs()],
        "framework_summary": plan.framework_summary_inputs,
        "optimizer_defaults": lambda: defaults_json(plan),
        "versions": lambda: (
            [paths.SUMMARY.format(ext="csv")]
            + ([paths.PROBES_TABLE.format(ext="csv")] if probe_plan is not None else [])
        ),
        "training_loop": lambda: [text, *defaults_json(plan)],
        "index": lambda: (
            [paths.SUMMARY.format(ext="csv"), paths.SUMMARY_SOURCES]
            + ([paths.PROBES_TABLE.format(ext="csv")] if probe_plan is not None else [])
        ),
    }[page]()


def page_params(page: str, plan, probe_plan) -> Any:
    """The params of ``page``'s job other than its code and its seal, which its record's
    params hash is of: the framework table's rows (``Plan.framework_summary_params``), the
    release matrix's plan (``versions.plan_params``); None for the other pages."""
    if page == "framework_summary":
        return plan.framework_summary_params()
    if page == "versions":
        from parity.report import versions

        return versions.plan_params(plan, probe_plan)
    return None


def plan_spec(page: str, plan, probe_plan, text: str, code: str | None) -> dict:
    """:func:`page_spec` of ``page`` under ``plan`` and ``probe_plan`` (None without
    probes), ``text`` and ``code`` as :func:`page_inputs` and :func:`page_spec` take them:
    the param ``seal`` of its rule, and what the check job holds its record to."""
    return page_spec(
        page, page_inputs(page, plan, probe_plan, text), page_params(page, plan, probe_plan), code
    )


def read_inputs(inputs: Iterable[str | os.PathLike]) -> dict[str, dict[str, str]]:
    """path → ``integrity.file_record`` of each input, taken before the job reads them."""
    return {str(p): integrity.file_record(p) for p in inputs}


def seal_page(
    spec: Mapping[str, Any],
    made_from: Mapping[str, Mapping[str, str]],
    written: Mapping[str, str | os.PathLike],
) -> dict:
    """Write the record of page ``spec`` (:func:`page_spec`) at ``spec["record"]``, after
    its files: ``made_from`` (:func:`read_inputs`), the sha256 of each file ``written``
    (kind → path) and the spec's params hash and code. Returns the record."""
    return integrity.write_record(
        spec["record"],
        spec["page"],
        made_from,
        written,
        params_sha256=spec["params_sha256"],
        code=spec["code"],
    )


def page_problems(spec: Mapping[str, Any]) -> list[str]:
    """Why page ``spec`` (:func:`page_spec`, resolved from the current config) is not what
    a person may trust, one line each naming the file and why: its record is missing or
    not intact; a file it wrote is gone or no longer what it wrote; it was made under
    another config (other params), by other code, from another set of inputs, or from
    inputs that changed since. Empty when it is current."""
    table, record_path = page_files(spec["page"])
    try:
        record = integrity.read_sealed_json(record_path)
    except FileNotFoundError:
        return [f"{table} has no record ({record_path} is missing): rerun the workflow"]
    except (OSError, integrity.IntegrityError) as e:
        return [f"{record_path}: {getattr(e, 'problem', None) or e}"]
    out = integrity.altered(record.get("tables", {}), record_path)
    if record.get("params_sha256") != spec["params_sha256"]:
        out.append(f"{table} was made under another config ({record_path} says so); rerun")
    if spec["code"] is not None and record.get("code") != spec["code"]:
        out.append(f"{table} was made by other code ({record_path} says so); rerun")
    made_from = record.get("made_from", {})
    if set(made_from) != set(spec["inputs"]):
        extra = sorted(set(made_from) - set(spec["inputs"]))
        lacking = sorted(set(spec["inputs"]) - set(made_from))
        out.append(
            f"{table} was made from other files than the config's"
            + (f" (not in the config: {', '.join(extra[:3])})" if extra else "")
            + (f" (missing: {', '.join(lacking[:3])})" if lacking else "")
        )
    out += [f"{table} is out of date: {why}" for why in integrity.changed(made_from)]
    return out


def other_page_warnings(spec: Mapping[str, Any]) -> list[str]:
    """Why page ``spec`` of :data:`OTHER_PAGES` (:func:`page_spec`, resolved from the
    current config) is not what a person may trust, one line each, ending with the target
    that makes it again: :func:`page_problems`' reasons, or that its folder holds files but
    no record. Empty when it is current, or when that target never ran (no folder)."""
    _, record_path, folder, target = OTHER_PAGES[spec["page"]]
    if not os.path.exists(record_path):
        if not os.path.isdir(folder) or not any(os.scandir(folder)):
            return []
        why = "made by an older version, or by hand"
        return [f"{folder}: not sealed ({record_path} is missing: {why}); `snakemake {target}`"]
    return [
        f"{why} (target {target}: `snakemake {target}` makes it again)"
        for why in page_problems(spec)
    ]


def recorded_files(records: Iterable[str | os.PathLike]) -> set[str]:
    """Every file the sealed ``records`` (those that exist and are intact) say they wrote."""
    out = set()
    for path in records:
        try:
            record = integrity.read_sealed_json(path)
        except (OSError, integrity.IntegrityError):
            continue
        out |= {os.path.normpath(r["path"]) for r in record.get("tables", {}).values()}
    return out


def unverified(covered: Iterable[str]) -> list[str]:
    """The files a person reads under ``results/`` (:data:`READ_DIRS`,
    :data:`READ_SUFFIXES`, :data:`READ_FILES` and Snakemake's report) that none of
    ``covered`` (paths the records ``check`` held were verified against) is: one line each,
    naming the file and why ``check`` cannot vouch for it. Relative to the working directory."""
    seen = {os.path.normpath(p) for p in covered}
    out = [
        f"{p}: not sealed (Snakemake's own report, made by `snakemake --report` from the "
        "files check verifies, not by a job); make it again after check passes"
        for p in SNAKEMAKE_REPORT
        if os.path.exists(p)
    ]
    for p in READ_FILES:
        if os.path.exists(p) and os.path.normpath(p) not in seen:
            out.append(
                f"{p}: not verified (no record check holds covers it: made by another "
                "config, or written by hand)"
            )
    for top, suffixes in READ_DIRS.items():
        for root, _, files in os.walk(top):
            for name in sorted(files):
                path = os.path.normpath(os.path.join(root, name))
                record = name.endswith(".sources.json")
                if name.endswith(suffixes) and not record and path not in seen:
                    out.append(
                        f"{path}: not verified (no record check holds covers it: made by "
                        "another target, such as faults, or left by another config)"
                    )
    return sorted(out)
