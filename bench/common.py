"""Helpers shared by the benchmarks: where things are and how to time them."""

from __future__ import annotations

import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))
#: Where benchmark runs keep their working folders (ignored by git). A benchmark that times
#: jobs makes a fresh folder (:func:`fresh_workdir`) or forces the jobs it times to rerun.
WORK = REPO / "results" / "bench"


def machine() -> str:
    """One line naming the machine the figures come from."""
    from parity.trace.provenance import cpu_model

    return f"{platform.node()}: {cpu_model()}, {os.cpu_count()} cores, {platform.platform()}"


def wall(cmd, cwd=REPO, env=None) -> tuple[float, str]:
    """(seconds, combined output) of one command; raises on failure."""
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd} failed:\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    return seconds, proc.stdout + proc.stderr


def scale_config(**record) -> dict:
    """The default config reduced to the scale experiment, enabled, with ``record`` merged."""
    with open(REPO / "config.yaml", encoding="utf-8") as f:
        config = yaml.safe_load(f)
    exp = config["experiments"]["scale_mlp"]
    exp["enabled"] = True
    exp["record"] = {**exp.get("record", {}), **record}
    config["only"] = ["scale_mlp"]
    config["framework_summary"] = []
    config["probes"]["enabled"] = False
    return config


def bench_trace_meta(steps: int) -> dict:
    """Metadata for a trace a benchmark writes itself (``TraceWriter`` timed alone): every
    field :class:`parity.trace.writer.TraceWriter` requires, for ``steps`` steps of the scale
    experiment, each recorded."""
    return {
        "experiment": "scale_mlp",
        "run": "bench",
        "framework": "none",
        "framework_version": "none",
        "device": "cpu",
        "host": "bench",
        "optimizer": {},
        "fixture_sha256": "0" * 64,
        "config_hash": "0" * 64,
        "steps": steps,
        "record_every": 1,
        "runner": {},
    }


def fresh_workdir(name: str) -> Path:
    """A new, empty working folder ``WORK/{name}-{pid}``, so nothing of an earlier run is
    reused (an earlier folder of that name is removed first). The caller removes it."""
    path = WORK / f"{name}-{os.getpid()}"
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path


def write_config(path: Path, config: dict) -> Path:
    """Write ``config`` for ``--configfile``; raises SystemExit where Snakemake's merge of it
    over config.yaml would run another config (``configcheck.merge_changes``: a section
    replaced, so the keys it left out come back)."""
    from parity.core.configcheck import merge_changes

    with open(REPO / "config.yaml", encoding="utf-8") as f:
        defaults = yaml.safe_load(f)
    differ = merge_changes(config, defaults, str(REPO / "schemas" / "config.schema.json"))
    if differ:
        raise SystemExit(f"the bench config is not the one Snakemake would run: {differ}")
    path.write_text(yaml.safe_dump(config))
    return path


def run_workflow(
    workdir: Path, config: dict, *targets: str, cores: int = 1, forcerun: tuple[str, ...] = ()
) -> str:
    """Run the workflow in ``workdir`` with ``config`` (replacing config.yaml); the rules in
    ``forcerun`` run again even when their outputs are up to date. Returns the output."""
    workdir.mkdir(parents=True, exist_ok=True)
    cfg = write_config(workdir / "bench-config.yaml", config)
    cmd = [
        SNAKEMAKE,
        "--snakefile",
        str(REPO / "Snakefile"),
        "--directory",
        str(workdir),
        "--configfile",
        str(cfg),
        "--cores",
        str(cores),
        *targets,
        # last: --forcerun takes every word after it as a rule name
        *(["--forcerun", *forcerun] if forcerun else []),
    ]
    return wall(cmd, cwd=workdir)[1]


def table(rows, columns) -> str:
    """A Markdown table of dict rows."""
    out = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    out += ["| " + " | ".join(str(r[c]) for c in columns) + " |" for r in rows]
    return "\n".join(out)


MIRROR_PROBE = """
import json, sys
from pathlib import Path
from snakemake.api import SnakemakeApi
from snakemake.settings.types import OutputSettings, ResourceSettings, ConfigSettings

snakefile, workdir = Path(sys.argv[1]), Path(sys.argv[2])
configfiles = [Path(p) for p in sys.argv[3:]]
with SnakemakeApi(OutputSettings(quiet={"all"})) as api:
    wf = api.workflow(
        resource_settings=ResourceSettings(cores=1),
        config_settings=ConfigSettings(configfiles=configfiles),
        snakefile=snakefile,
        workdir=workdir,
    )
    workflow = wf.dag().workflow_api._workflow
    workflow._prepare_dag(forceall=True, ignore_incomplete=False, lock_warn_only=True)
    workflow._build_dag()
    rules, jobs = {}, []
    for job in workflow.dag.jobs:
        rule = job.rule
        if rule.name not in rules:
            rules[rule.name] = {
                "output": [str(f) for f in rule.output],
                "log": [str(f) for f in rule.log],
                "benchmark": str(rule.benchmark) if rule.benchmark else None,
            }
        out = [str(f) for f in job.output] + [str(f) for f in job.log]
        jobs.append({
            "rule": rule.name,
            "wildcards": sorted(job.wildcards_dict.items()),
            "input": sorted({str(f) for f in job.input}),
            "output": out + ([str(job.benchmark)] if job.benchmark else []),
        })
    print(json.dumps({"rules": rules, "jobs": jobs}))
"""


def mirror_snakefile(found: dict) -> str:
    """The bare twin of a real DAG (``found``: its rules' output, log and benchmark
    patterns, wildcard constraints inlined as Snakemake resolved them, and each job's rule,
    wildcards and input files, as :func:`mirror_workflow` reads them): the same rules with
    the same patterns, so Snakemake matches the same files against the same rules, each job
    a shell ``touch`` of its outputs and log, its inputs looked up in a table by rule and
    wildcards. What it leaves out is this workflow's own code: the config, its schema and
    plan, the probe files, the input, params and priority functions."""
    inputs: dict[str, dict] = {}
    for job in found["jobs"]:
        inputs.setdefault(job["rule"], {})[repr(tuple(map(tuple, job["wildcards"])))] = job["input"]
    lines = [f"INPUTS = {inputs!r}", ""]
    for name, rule in found["rules"].items():
        if name == "all":
            (target,) = inputs["all"].values()
            lines += [f"rule all:\n    input: {target!r}\n"]
            continue
        lines += [
            f"rule {name}:",
            f"    input: lambda wc: INPUTS[{name!r}][repr(tuple(sorted(wc.items())))]",
            f"    output: {rule['output']!r}",
        ]
        lines += [f"    log: {rule['log']!r}"] if rule["log"] else []
        lines += [f"    benchmark: {rule['benchmark']!r}"] if rule["benchmark"] else []
        lines += ["    shell: 'touch {output} {log}'", ""]
    return "\n".join(lines)


def mirror_workflow(workdir: Path, configfile: Path | None, folder: Path) -> tuple[list[str], Path]:
    """The bare twin of the real workflow in ``workdir`` (run with ``configfile`` merged
    over config.yaml, or config.yaml alone when None): the
    same rules, jobs and files (:func:`mirror_snakefile`), made and run once in ``folder``
    (made afresh), inputs that no job makes created empty first when relative. Returns its
    no-op rerun command and folder, for :func:`interleaved_medians`. Raises RuntimeError
    when Snakemake cannot build the real DAG or the twin's."""
    import json

    _, out = wall(
        [
            sys.executable,
            "-c",
            MIRROR_PROBE,
            str(REPO / "Snakefile"),
            str(workdir),
            *([str(configfile)] if configfile else []),
        ],
        cwd=workdir,
    )
    # wall() returns stdout then stderr: the DAG is the one line that is a JSON object
    found = json.loads(next(line for line in out.splitlines() if line.startswith('{"rules"')))
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    made = {f for j in found["jobs"] for f in j["output"]}
    for f in {f for j in found["jobs"] for f in j["input"]} - made:
        if not os.path.isabs(f):
            Path(folder, f).parent.mkdir(parents=True, exist_ok=True)
            Path(folder, f).touch()
    (folder / "Snakefile").write_text(mirror_snakefile(found))
    wall([SNAKEMAKE, "--cores", "2", "--quiet", "all"], cwd=folder)
    return [SNAKEMAKE, "--cores", "1"], folder


def interleaved_medians(commands: dict, repeat: int = 7) -> dict[str, float]:
    """Median wall seconds of each command (name → (argv, cwd)), timed in turns: after the
    dirty pages are written out (``os.sync``: a run just finished writes hundreds of MB)
    and one warm-up run of each, ``repeat`` rounds, each running every command once, in an
    order that rotates from round to round, so a slow spell of a shared machine falls on
    all of them alike."""
    os.sync()
    names = list(commands)
    for name in names:
        wall(*commands[name])
    times = {name: [] for name in names}
    for i in range(repeat):
        for name in names[i % len(names) :] + names[: i % len(names)]:
            times[name].append(wall(*commands[name])[0])
    return {name: statistics.median(t) for name, t in times.items()}
