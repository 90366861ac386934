"""A remote host's word is not taken as it is (issue 60, kind 6):

1. every program a remote host's job runs here (ssh, git, rsync) is checked before any
   remote work, the refusal one line naming the program and the host (the job, and the
   workflow while it builds the DAG); the programs it runs there (git, rsync or
   ``rsync_path``) are checked in the first contact, before anything is made there;
2. a trace or probe result fetched from a host is refused, naming both, when its sealed
   host (or CPU) is another machine than the one the host describes;
3. text that comes from a remote (its host name, system, CPU, error messages; a trace's or
   probe result's host, versions, messages) is escaped wherever Markdown or HTML shows it
   (``parity.render.tables.md_text``): a hostile description leaves every table whole.

Against the fake remote of tests/fake_remote.py (a fake ``ssh`` that runs what it is asked
with ``sh -c``; the real rsync and git at both ends).
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import socket
from pathlib import Path

import numpy as np
import pytest

from parity.core import hosts, integrity, paths
from parity.core.fileio import sha256_file
from parity.remote import commands, crosshost
from parity.remote import fetch as remote
from parity.remote import verify as remote_verify
from parity.render import tables
from parity.report import pages, partial, summary
from parity.trace.provenance import cpu_model

from conftest import load_test_config, run_workflow, write_trace
from fake_remote import FakeRemote

HOST = "far"
TRACE = "results/traces/hand/torch-f32-cpu.parquet"
PROBE = "results/probes/p/torch-f32-cpu.parquet"
EXPECT = {"experiment": "hand", "run": "torch", "dtype": "f32", "device": "cpu"}
LABEL = f"hand torch f32 cpu@{HOST}"
#: A description no table survives unescaped: a line break and a heading, pipes, a script,
#: backticks, emphasis, a link, an entity, a control character and a bidi override.
HOSTILE = (
    "evil\n# heading | x || y <script>alert(1)</script> `code` **bold** _it_ "
    "[link](http://x) &amp; \\| \r\n- item\x1b\u202e"
)
#: The same without line breaks: what one line of a remote's ``uname -n`` can say.
HOSTILE_LINE = "evil | # heading <script>alert(1)</script> `code` **b** [l](x) &amp;"


def proc_cpuinfo_model() -> str:
    """This machine's /proc/cpuinfo model name, or "" (what a remote reports as cpu_model)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


needs_tools = pytest.mark.skipif(
    not (shutil.which("rsync") and shutil.which("git")), reason="needs rsync and git"
)


def trace_bytes(tmp_path: Path, **meta) -> bytes:
    rng = np.random.default_rng(5)
    steps = [{"w": rng.standard_normal(64)} for _ in range(3)]
    return write_trace(tmp_path / "made.parquet", steps, **meta).read_bytes()


@pytest.fixture
def fake(tmp_path, monkeypatch):
    fake = FakeRemote(tmp_path / "fake")
    monkeypatch.setenv("PATH", fake.path_env())
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return fake


def job_params(commit: str, **settings) -> dict:
    return {
        "host": HOST,
        "settings": {"ssh": "farhost", "path": "~/parity", "devices": ["cpu"], **settings},
        "commit": commit,
        "config": {"devices": ["cpu"]},
        "traces": {TRACE: EXPECT},
        "probes": [],
        "labels": {TRACE: LABEL},
    }


def run_job(fake: FakeRemote, params: dict) -> dict:
    manifest = remote.REMOTE_MANIFEST.format(host=HOST)
    return remote.remote_fetch(params, manifest, logging.getLogger("test"), str(fake.here))


def status() -> dict:
    return json.loads(Path(hosts.REMOTE_STATUS.format(host=HOST)).read_text())


def path_without(tmp_path: Path, fake: FakeRemote, tool: str) -> str:
    """A PATH of one folder holding the fake ssh, git and rsync, less ``tool``."""
    d = tmp_path / f"bin-without-{tool}"
    d.mkdir()
    for name, target in (
        ("ssh", fake.bin / "ssh"),
        ("git", shutil.which("git")),
        ("rsync", shutil.which("rsync")),
    ):
        if name != tool:
            (d / name).symlink_to(target)
    return str(d)


# ----- 1. the programs a remote needs, checked before any remote work ---------------------


@needs_tools
@pytest.mark.parametrize("tool", ["rsync", "ssh", "git"])
def test_a_program_missing_here_is_refused_before_any_remote_work(fake, tmp_path, tool):
    commit = fake.make_checkout({TRACE.removeprefix("results/"): trace_bytes(tmp_path)})
    os.environ["PATH"] = path_without(tmp_path, fake, tool)  # monkeypatch restores it
    with pytest.raises(commands.RemoteError) as e:
        run_job(fake, job_params(commit))
    message = str(e.value)
    assert "\n" not in message
    assert message.startswith(f"remote {HOST}: {tool} is not on this machine's PATH")
    assert "nothing was run there" in message
    assert e.value.stage == "local-tools"
    # nothing was asked of the remote: no ssh started, no checkout made there
    assert fake.calls() == []
    assert list(fake.home.iterdir()) == []
    # the failure is recorded where the partial summary reads it, with the cells it owes
    assert status()["stage"] == "local-tools" and status()["error"] == message
    assert status()["missing"] == [LABEL]
    assert not Path(remote.REMOTE_MANIFEST.format(host=HOST)).exists()


@needs_tools
def test_uncommitted_runner_sources_are_refused_before_any_remote_work(fake, tmp_path):
    """The remote builds the pushed commit: a runner source that is new (untracked) here
    would make every trace it sends back another build's, so the job refuses first."""
    commit = fake.make_checkout({TRACE.removeprefix("results/"): trace_bytes(tmp_path)})
    new = fake.here / "rust" / "candle-parity" / "src" / "extra.rs"
    new.parent.mkdir(parents=True)
    new.write_text("// new\n")
    with pytest.raises(commands.RemoteError) as e:
        run_job(fake, job_params(commit))
    message = str(e.value)
    assert "\n" not in message
    assert message.startswith(f"remote {HOST}: uncommitted changes to files the runners")
    assert "rust/candle-parity/src/extra.rs" in message
    assert f"commit {commit[:12]}" in message and "commit them first" in message
    assert e.value.stage == "local-changes"
    assert fake.calls() == []
    assert status()["stage"] == "local-changes" and status()["missing"] == [LABEL]


def test_only_files_the_runners_are_built_from_refuse(tmp_path):
    """Modified, staged, deleted or untracked runner sources (builds.RUST_PATTERNS) refuse,
    the first three named; any other uncommitted file does not (the job only warns)."""
    import subprocess

    def git(*args):
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)

    git("init", "-q")
    git("config", "user.email", "t@t")
    git("config", "user.name", "t")
    files = [
        "rust/Cargo.toml",
        "rust/a/Cargo.toml",
        "rust/a/build.rs",
        "rust/a/src/lib.rs",
        "rust/a/src/m/deep.rs",
        "README.md",
        "rust/a/notes.txt",
    ]
    for f in files:
        (tmp_path / f).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / f).write_text("x\n")
    git("add", "-A")
    git("commit", "-qm", "c")
    assert commands.source_change_problem(HOST, tmp_path, "f" * 40) is None
    (tmp_path / "README.md").write_text("y\n")
    (tmp_path / "rust/a/notes.txt").write_text("y\n")
    (tmp_path / "rust/a/untracked.txt").write_text("y\n")
    assert commands.source_change_problem(HOST, tmp_path, "f" * 40) is None
    for f in files[:5]:
        (tmp_path / f).write_text("changed\n")
        got = commands.source_change_problem(HOST, tmp_path, "f" * 40)
        assert got is not None and f in got, f
        git("checkout", "-q", "--", f)  # the temp repo's own state only
    (tmp_path / "rust/a/src/lib.rs").unlink()
    assert "rust/a/src/lib.rs" in commands.source_change_problem(HOST, tmp_path, "f" * 40)
    git("checkout", "-q", "--", "rust/a/src/lib.rs")
    for i in range(5):
        (tmp_path / f"rust/a/src/new{i}.rs").write_text("x\n")
    got = commands.source_change_problem(HOST, tmp_path, "f" * 40)
    assert "and 2 more" in got and got.count("rust/a/src/new") == 3


def test_every_program_the_job_runs_here_is_checked():
    """The check names what the job's commands start here: ssh (and through it rsync's
    -e and git's core.sshCommand), git, rsync."""
    started = {
        commands.ssh_argv({"ssh": "h"}, "true")[0],
        commands.rsync_argv({"ssh": "h"}, "/p", "/f", "/d")[0],
        "git",  # remote.sync_checkout's push, remote_fetch's status, the rules' rev-parse
    }
    assert started == set(commands.LOCAL_TOOLS)
    assert commands.local_tool_problem(HOST, {"PATH": "/nonexistent"}) == (
        f"remote {HOST}: "
        + "; ".join(
            f"{t} is not on this machine's PATH ({what})"
            for t, what in commands.LOCAL_TOOLS.items()
        )
        + ": install it here or put it on PATH; nothing was run there"
    )
    if all(shutil.which(t) for t in commands.LOCAL_TOOLS):
        assert commands.local_tool_problem(HOST) is None


@needs_tools
def test_rsync_missing_there_is_refused_at_first_contact_before_anything_is_made(fake, tmp_path):
    commit = fake.make_checkout({TRACE.removeprefix("results/"): trace_bytes(tmp_path)})
    there = "/nowhere/bin/rsync"
    with pytest.raises(commands.RemoteError) as e:
        run_job(fake, job_params(commit, rsync_path=there))
    message = str(e.value)
    assert "\n" not in message and message.startswith(f"remote {HOST}: ")
    assert f"finds no {there} there" in message and "nothing was run there" in message
    assert e.value.stage == "connect"
    # one contact, and nothing made there: no checkout, no bootstrap, no snakemake
    assert len(fake.calls()) == 1
    assert not (fake.home / "parity").exists()
    assert status()["stage"] == "connect"


def test_the_first_contact_checks_git_and_the_rsync_program_there(tmp_path):
    """The remote side's check, run by a real shell: each missing program is named."""
    import subprocess

    ok = commands.remote_tools_check({})
    proc = subprocess.run(["sh", "-c", ok], capture_output=True, text=True)
    assert proc.returncode == (0 if shutil.which("git") and shutil.which("rsync") else 3)
    not_exe = tmp_path / "r sync"
    not_exe.write_text("")
    for rsync_path in (str(tmp_path / "none"), str(not_exe)):
        line = commands.remote_tools_check({"rsync_path": rsync_path})
        proc = subprocess.run(["sh", "-c", line], capture_output=True, text=True)
        assert proc.returncode == 3
        assert f"{commands.MISSING_THERE} {rsync_path}" in proc.stdout.splitlines()
    line = commands.remote_tools_check({})
    proc = subprocess.run(
        ["/bin/sh", "-c", line], capture_output=True, text=True, env={"PATH": str(tmp_path)}
    )
    assert proc.returncode == 3
    assert proc.stdout.splitlines() == [
        f"{commands.MISSING_THERE} git",
        f"{commands.MISSING_THERE} rsync",
    ]


@pytest.mark.workflow
def test_the_workflow_refuses_a_missing_rsync_before_any_job(tmp_path):
    """PATH without rsync: the remote target is refused while the DAG is built, one line
    naming rsync and the host; no job ran (nothing under results/)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for folder in os.environ["PATH"].split(os.pathsep):
        if not os.path.isdir(folder):
            continue
        for entry in os.scandir(folder):
            link = bin_dir / entry.name
            if entry.name != "rsync" and not link.exists() and not link.is_symlink():
                link.symlink_to(entry.path)
    env = {**os.environ, "PATH": str(bin_dir)}
    assert shutil.which("rsync", path=env["PATH"]) is None
    config = load_test_config("remote")
    config["remote"] = {HOST: {"ssh": "farhost", "path": "~/parity", "devices": ["cpu"]}}
    work = tmp_path / "work"
    proc = run_workflow(work, config, "--cores", "1", "remote", check=False, env=env)
    assert proc.returncode != 0
    line = next(x for x in proc.stdout.splitlines() if "is not on this machine's PATH" in x)
    assert line.strip().startswith(f"remote {HOST}: rsync is not on this machine's PATH")
    assert not (work / "results").exists()


# ----- 2. a file made on another machine than the host describes --------------------------


@needs_tools
@pytest.mark.parametrize(
    "meta,said",
    [
        ({"host": "elsewhere"}, "made on host 'elsewhere'"),
        pytest.param(
            {"host": socket.gethostname(), "runner": {"cpu": "A CPU of another machine"}},
            "made on a CPU 'A CPU of another machine'",
            marks=pytest.mark.skipif(
                not proc_cpuinfo_model(), reason="no model name in /proc/cpuinfo here"
            ),
        ),
    ],
    ids=["host", "cpu"],
)
def test_a_trace_made_on_another_machine_is_refused_naming_both(fake, tmp_path, meta, said):
    commit = fake.make_checkout({TRACE.removeprefix("results/"): trace_bytes(tmp_path, **meta)})
    with pytest.raises(commands.RemoteError) as e:
        run_job(fake, job_params(commit, bootstrap=False))
    message = str(e.value)
    local = remote.remote_file(HOST, TRACE)
    assert LABEL in message and local in message and said in message
    if meta["host"] == "elsewhere":
        assert f"remote {HOST} describes itself as {socket.gethostname()!r}" in message
    else:
        assert f"remote {HOST} describes its CPU as {cpu_model()!r}" in message
    assert f"remove {TRACE} in the remote checkout" in message
    assert not Path(remote.REMOTE_MANIFEST.format(host=HOST)).exists()
    assert not Path(local).exists()  # never recorded, nor left, as good
    assert status()["missing"] and LABEL in status()["missing"][0]


def write_probe(local: Path, meta: dict) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from parity.probe.results import METADATA_KEY

    local.parent.mkdir(parents=True, exist_ok=True)
    table = pa.table({"v": pa.array(np.arange(10, dtype=np.float64))})
    table = table.replace_schema_metadata(integrity.seal(METADATA_KEY, json.dumps(meta)))
    pq.write_table(table, local, **integrity.PARQUET_WRITE)


def test_a_probe_result_made_on_another_machine_is_refused_naming_both(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    local = Path(remote.remote_file(HOST, PROBE))
    job = remote.FetchJob(HOST, {}, "c", {}, probes=[PROBE])
    described = {"hostname": "mac.local", "cpu_model": "Apple M2"}
    write_probe(local, {"host": "mac.local", "runner": {"cpu": "Apple M2"}})
    assert remote.verify(job, described) == ({str(local): sha256_file(local)}, [])
    write_probe(local, {"host": "ci-runner-7", "runner": {"cpu": "Apple M2"}})
    good, missing = remote.verify(job, described)
    assert good == {} and len(missing) == 1
    assert "'ci-runner-7'" in missing[0] and "'mac.local'" in missing[0]
    assert PROBE in missing[0] and not local.exists()
    # a remote that reports no host name cannot vouch for any file
    write_probe(local, {"host": "mac.local", "runner": {}})
    good, missing = remote.verify(job, {"hostname": "", "cpu_model": ""})
    assert good == {} and "reported no host name" in missing[0]


def test_the_description_asks_what_a_trace_seals(tmp_path):
    """describe_host's commands, run by a real shell here, report this machine's host name
    and CPU exactly as a trace made here seals them (so a real remote's own files pass)."""
    import subprocess

    class Local:
        def ssh(self, line, stage, **kw):
            return subprocess.run(["sh", "-c", line], capture_output=True, text=True)

    said = remote.describe_host(Local(), str(tmp_path))
    assert said["hostname"] == socket.gethostname()
    assert said["cpu_model"] == proc_cpuinfo_model()
    if said["cpu_model"]:  # where there is one, it is what a trace made here seals
        assert said["cpu_model"] == cpu_model()
    meta = {"host": socket.gethostname(), "runner": {"cpu": cpu_model()}}
    assert remote_verify.provenance_problem(meta, said, HOST) is None


# ----- 3. remote text escaped wherever Markdown or HTML shows it ----------------------------


def table_rows(md: str) -> list[list[str]]:
    """The rows of every pipe table in ``md``, split at unescaped pipes (GFM's rule)."""
    rows = []
    for line in md.splitlines():
        if line.startswith("|"):
            rows.append(re.split(r"(?<!\\)\|", line.strip())[1:-1])
    return rows


def assert_intact(md: str, columns: int, headings: set[str]) -> None:
    """Every table row has ``columns`` cells; the only headings are ``headings``; no tag
    and no code span or emphasis the text could have opened survives in the HTML twin."""
    rows = table_rows(md)
    assert rows and all(len(r) == columns for r in rows), rows
    assert {x for x in md.splitlines() if x.startswith("#")} == headings
    assert "<script>" not in md
    page = tables.markdown_to_html(md)
    assert "<script>" not in page and "&lt;script&gt;" in page
    for tr in re.findall(r"<tr>(.*?)</tr>", page):
        assert len(re.findall(r"<t[dh]>", tr)) == columns
    assert "<code>code</code>" not in page and "<b>bold</b>" not in page
    try:
        from markdown_it import MarkdownIt
    except ImportError:
        return
    rendered = MarkdownIt("commonmark").enable("table").render(md)
    assert "<script>" not in rendered and "<a href" not in rendered
    assert "<code>code</code>" not in rendered and "<strong>bold</strong>" not in rendered
    for tr in re.findall(r"<tr>(.*?)</tr>", rendered, re.S):
        assert len(re.findall(r"<t[dh][ >]", tr)) == columns
    assert {h for h in re.findall(r"<h\d>(.*?)</h\d>", rendered)} == {
        h.lstrip("#").strip() for h in headings
    }


def test_md_text_reads_as_the_text_itself():
    text = tables.md_text(HOSTILE)
    assert "\n" not in text and "\r" not in text and "\x1b" not in text
    assert "\u202e" not in text
    page = tables.markdown_to_html(f"| a |\n|---|\n| {text} |\n")
    shown = re.search(r"<td>(.*)</td>", page).group(1)
    import html

    want = HOSTILE.replace("\r", " ").replace("\n", " ").replace("\x1b", "\ufffd")
    assert html.unescape(shown) == want.replace("\u202e", "\ufffd")
    assert tables.md_text("a3_sgd cpu@mac") == "a3_sgd cpu@mac"  # plain text unchanged
    assert tables.md_text(None) == "" and tables.md_text(1.5) == "1.5"


@needs_tools
def test_a_hostile_host_name_leaves_the_cross_host_table_whole(fake, tmp_path):
    """End to end: the remote's ``uname -n`` says HOSTILE_LINE (and its trace seals the
    same); the manifest records it as it is; the cross-host table shows it as text."""
    uname = fake.bin / "uname"
    uname.write_text(
        "#!/bin/sh\n"
        f"if [ \"$1\" = -n ]; then printf '%s\\n' {shell_quote(HOSTILE_LINE)}; "
        f'else exec {shutil.which("uname")} "$@"; fi\n'
    )
    uname.chmod(0o755)
    data = trace_bytes(tmp_path, host=HOSTILE_LINE)
    commit = fake.make_checkout({TRACE.removeprefix("results/"): data})
    record = run_job(fake, job_params(commit, bootstrap=False))
    assert record["remote"]["hostname"] == HOSTILE_LINE
    row = {c: "x" for c in crosshost.COLUMNS}
    row.update(kind="same run", candidate=f"torch f32 cpu@{HOST} {HOSTILE}", worst_dparam=0.0)
    md = crosshost.markdown([row, row], record)
    assert_intact(md, 9, set())
    # the header line is one paragraph naming the host as text
    head = md.splitlines()[0]
    assert head.startswith(f"Remote host {HOST} (evil \\| # heading \\<script\\>")


def shell_quote(text: str) -> str:
    import shlex

    return shlex.quote(text)


def test_a_hostile_description_leaves_every_page_whole(tmp_path, monkeypatch):
    """The partial summary (a remote host's error rows and their bullets, its error text
    from the host's status.json), the provenance page (a trace's host and CPU) and the
    probe table (a remote framework's message) keep their tables whole."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "results" / "tables").mkdir(parents=True)
    # a host that failed: its status.json holds the remote's error text
    Path(paths.REMOTE_DIR.format(host=HOST)).mkdir(parents=True)
    Path(hosts.REMOTE_STATUS.format(host=HOST)).write_text(
        json.dumps({"stage": "bootstrap", "error": f"remote {HOST}: {HOSTILE}"})
    )
    from parity.plan.plan import Plan

    plan = Plan(load_test_config("remote"))
    experiment = next(iter(plan.experiments))
    job = {"host": HOST, "experiment": experiment, "result": "none.json"}
    job["job"] = crosshost.crosshost_params(plan, HOST, ["cpu"], experiment)
    errors = partial.remote_error_rows(job, "no result")
    assert errors and all(HOSTILE in e["status"] for e in errors)
    rows = summary.summary_rows({}, [], errors)
    out_md = str(tmp_path / "results/tables/summary.partial.md")
    summary.write_tables(rows, out_md.replace(".md", ".csv"), out_md, 0, intro="A run failed.\n\n")
    md = Path(out_md).read_text()
    assert_intact(md, 14, {"# Summary (partial)"})
    assert all(not x.startswith("- item") for x in md.splitlines())
    html_page = Path(out_md.replace(".md", ".html")).read_text()
    assert "<script>" not in html_page
    # the provenance page: a trace whose sealed host and CPU are hostile
    trace = write_trace(
        tmp_path / "t.parquet",
        [{"w": np.zeros(3)}, {"w": np.ones(3)}],
        host=HOSTILE,
        runner={"cpu": HOSTILE, "python": "3.11"},
    )
    prov_md = tmp_path / "prov.md"
    pages.provenance([str(trace)], str(tmp_path / "prov.csv"), str(prov_md))
    md = prov_md.read_text()
    assert_intact(md, 14, {"# Provenance of every trace"})
    # the probe table: a remote framework's message in a note
    probe_row = {
        "probe": "p",
        "case": "c",
        "quantity": "y",
        "framework": "torch",
        "version": "",
        "device": f"cpu@{HOST}",
        "dtype": "f32",
        "shape": [1],
        "values": None,
        "reference": "exact",
        "reference_values": None,
        "max_diff": None,
        "tolerance": None,
        "verdict": "error",
        "note": HOSTILE,
    }
    md = tables.probes_markdown([probe_row], {"p": "A probe."}, {}, {})
    assert_intact(md, 12, {"# Probes", "## p"})
