"""Every command README.md and docs/*.md show works as written.

A command is a line of a fenced ``sh``/``bash``/``shell``/``console`` block (split at
``&&``, ``||``, ``;`` and ``|``) or an inline code span that starts with a snakemake
program. Each snakemake command runs as a dry run (``-n`` added) from a git copy of the
repository's tracked files, with the files the page makes before it: a fenced ``yaml`` block
whose first line is a comment naming a file (``# mac.yaml``) is that file, and a ``printf
… > FILE`` line of a shell block is run. So ``snakemake --configfile ops.yaml target``,
where ``--configfile`` swallows the target as a second config file, fails here with the
page and line. A program given as a repository path (``scripts/dev/test``) must exist.

Only dry runs, so it is fast: each command costs one DAG build (about 4 s here).
"""

from __future__ import annotations

import fnmatch
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))
SHELL_LANGS = {"sh", "bash", "shell", "console"}
FENCE_OPEN = re.compile(r"^(\s*)```(\S*)\s*$")
FENCE_CLOSE = re.compile(r"^\s*```\s*$")
INLINE_CODE = re.compile(r"`([^`]+)`")
SNAKEMAKE_PROGRAM = re.compile(r"^(?:\S*/)?snakemake$")
#: The placeholder own-model.md writes for the checkout; the test's copy stands for it.
CHECKOUT_PLACEHOLDER = "/path/to/this/checkout"
#: Inline spans that name snakemake but are no command to run, with the reason.
NOT_COMMANDS = {
    "snakemake --cores": "a remote host's config key: the option it sets (docs/remote.md)",
    "snakemake --version": "the baseline timing of docs/performance.md: runs no workflow",
    "snakemake --profile path/to/copy": "a placeholder for a copy of a profile",
    ".venv/bin/snakemake <devices…> --cores N --configfile results/remote-config.yaml": (
        "docs/remote.md: the template of what the workflow runs on a remote host"
    ),
}
#: Folders a documented run writes that a later command reads; a dry run cannot make
#: them, so the copy gets a stand-in (the fuzzer writes probe files: one default probe).
RUN_OUTPUTS = {"results/fuzz/probes": REPO / "probes" / "conv1d_grad.yaml"}
#: The config docs/remote.md writes: a `remote` target without hosts is refused by design
#: ("the remote target needs remote hosts in the config"), so the front page's and
#: usage.md's bare `snakemake remote` run with the page's own example.
REMOTE_PAGE = REPO / "docs" / "remote.md"


@dataclass(frozen=True)
class Command:
    """One documented command: where it is written and what the page made before it."""

    page: Path
    line: int
    text: str
    files: tuple[tuple[str, str], ...]  # (name, content) of the page's files before it
    block: tuple[str, ...]  # the other commands of its shell block (empty: inline)

    def where(self) -> str:
        """``docs/probes.md:33``."""
        return f"{self.page.relative_to(REPO)}:{self.line}"


def fenced_blocks(lines: list[str]):
    """(language, first body line number, body lines, indentation) of each fenced block."""
    i = 0
    while i < len(lines):
        m = FENCE_OPEN.match(lines[i])
        if m:
            j = i + 1
            while j < len(lines) and not FENCE_CLOSE.match(lines[j]):
                j += 1
            indent = len(m.group(1))
            yield m.group(2), i + 2, [b[indent:] for b in lines[i + 1 : j]]
            i = j
        i += 1


def split_commands(line: str) -> list[str]:
    """The commands of one shell line: split at ``&&``, ``||``, ``;`` and ``|``, comments
    dropped, a leading ``$ `` prompt removed."""
    line = re.sub(r"^\$\s+", "", line.strip())
    lex = shlex.shlex(line, posix=True, punctuation_chars=True)
    lex.whitespace_split = True
    lex.commenters = "#"
    commands, current = [], []
    for token in lex:
        if token in ("&&", "||", ";", "|"):
            commands.append(current)
            current = []
        else:
            current.append(token)
    commands.append(current)
    return [shlex.join(c) for c in commands if c]


def is_snakemake(command: str) -> bool:
    """Whether a command runs snakemake."""
    words = command.split()
    return bool(words) and bool(SNAKEMAKE_PROGRAM.match(words[0]))


def page_commands(page: Path) -> tuple[list[Command], list[str]]:
    """The page's commands in order, and the lines that look like an unlabelled command
    (a snakemake line in a block that is not a shell block: label it ``sh``)."""
    text = page.read_text(encoding="utf-8")
    lines = text.splitlines()
    events = []  # (line, kind, payload)
    fenced = set()
    for lang, start, body in fenced_blocks(lines):
        fenced.update(range(start - 2, start + len(body)))
        if lang in SHELL_LANGS:
            joined, first = [], None
            block = []
            for k, raw in enumerate(body):
                first = start + k if first is None else first
                if raw.rstrip().endswith("\\"):
                    joined.append(raw.rstrip()[:-1])
                    continue
                joined.append(raw)
                block.append((first, " ".join(joined)))
                joined, first = [], None
            cmds = [(n, c) for n, line in block for c in split_commands(line)]
            for n, c in cmds:
                events.append((n, "shell", (c, tuple(x for _, x in cmds))))
        elif lang == "yaml" and body:
            name = re.match(r"^#\s*(\S+\.ya?ml)\b", body[0])
            if name:
                events.append((start, "file", (name.group(1), "\n".join(body) + "\n")))
    prose = "\n".join("" if n in fenced else raw for n, raw in enumerate(lines))
    for m in INLINE_CODE.finditer(prose):
        span = " ".join(m.group(1).split())
        if is_snakemake(span) and span not in NOT_COMMANDS:
            events.append((prose.count("\n", 0, m.start()) + 1, "inline", span))
    stray = []
    for lang, start, body in fenced_blocks(lines):
        if lang not in SHELL_LANGS:
            stray += [
                f"{page.relative_to(REPO)}:{start + k}: {b.strip()}"
                for k, b in enumerate(body)
                if is_snakemake(re.sub(r"^\$\s+", "", b.strip()))
            ]
    events.sort(key=lambda e: e[0])
    files: dict[str, str] = {}
    commands = []
    for n, kind, payload in events:
        if kind == "file":
            files[payload[0]] = payload[1]
            continue
        textc, block = payload if kind == "shell" else (payload, ())
        if kind == "shell" and textc.startswith("printf ") and ">" in shlex.split(textc):
            words = shlex.split(textc)
            target = words[words.index(">") + 1]
            content = subprocess.run(
                ["bash", "-c", shlex.join(words[: words.index(">")])],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            files[target] = content
            continue
        commands.append(Command(page, n, textc, tuple(files.items()), block))
    return commands, stray


ALL = [c for page in PAGES for c in page_commands(page)[0]]
#: Each snakemake command once (the first place it is written, with its page's files).
SNAKEMAKE_COMMANDS = list(
    {(c.text, c.files): c for c in reversed(ALL) if is_snakemake(c.text)}.values()
)[::-1]


def test_pages_have_snakemake_commands():
    """The extraction finds the commands the pages are known to show (it cannot pass by
    finding none), and every snakemake line of a code block is in a shell block."""
    texts = {c.text for c in SNAKEMAKE_COMMANDS}
    assert ".venv/bin/snakemake --cores 8" in texts
    assert any("ops.yaml" in t for t in texts)
    assert any("mac.yaml" in t for t in texts)
    stray = [s for page in PAGES for s in page_commands(page)[1]]
    assert not stray, "snakemake lines outside a shell block (label it sh):\n" + "\n".join(stray)


def test_split_commands():
    """Lines split at the shell's separators; comments and prompts go."""
    assert split_commands("a && b --x 'y z'   # note") == ["a", "b --x 'y z'"]
    assert split_commands("$ snakemake -n; echo ok") == ["snakemake -n", "echo ok"]


@pytest.mark.parametrize("command", [c for c in ALL if not is_snakemake(c.text)], ids=str)
def test_repository_programs_exist(command):
    """A command whose program is a repository path names a file that exists."""
    program = shlex.split(command.text)[0]
    if "/" not in program or program.startswith(("/", "~", CHECKOUT_PLACEHOLDER)):
        return
    assert (REPO / program).exists(), f"{command.where()}: {program} does not exist"


@pytest.fixture(scope="module")
def copy(tmp_path_factory) -> Path:
    """A git checkout of the repository's tracked files (the remote target needs a
    commit), with nothing built or run."""
    root = tmp_path_factory.mktemp("doc-commands") / "repo"
    tracked = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "-z"], capture_output=True, check=True
    ).stdout.decode()
    for name in filter(None, tracked.split("\0")):
        src = REPO / name
        if src.is_file():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, root / name)
    git = ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@localhost"]
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "copy"], check=True)
    return root


def remote_example() -> tuple[str, str]:
    """docs/remote.md's example config file (name, content)."""
    files = dict(page_commands(REMOTE_PAGE)[0][-1].files)
    name = next(n for n in files if "remote:" in files[n])
    return name, files[name]


def dry_run(command: Command, copy: Path) -> tuple[list[str], Path]:
    """The dry-run argv of a documented snakemake command and the folder it runs in."""
    words = [w.replace(CHECKOUT_PLACEHOLDER, str(copy)) for w in shlex.split(command.text)]
    cwd = copy
    if CHECKOUT_PLACEHOLDER in command.text:
        # docs/own-model.md: run from a copy of examples/template, the user's folder
        cwd = copy.parent / "own-model"
        if not (copy / "examples" / "template" / "candle-port" / "Cargo.toml").exists():
            pytest.skip("examples/template has no candle-port crate on this branch yet")
        if not cwd.exists():
            shutil.copytree(copy / "examples" / "template", cwd)
    argv = [SNAKEMAKE, "-n", *words[1:]]
    if "--report" in argv:
        # the report needs a finished run: dry-run its targets and options instead
        k = argv.index("--report")
        del argv[k : k + 2]
    for name, content in command.files:
        (cwd / name).write_text(content, encoding="utf-8")
    if "remote" in words[1:] and not any(n in command.text for n, _ in command.files):
        name, content = remote_example()
        (cwd / name).write_text(content, encoding="utf-8")
        argv.append(f"--configfile={name}")
    for folder, standin in RUN_OUTPUTS.items():
        if folder in "\n".join(c for _, c in command.files):
            (cwd / folder).mkdir(parents=True, exist_ok=True)
            shutil.copy2(standin, cwd / folder / standin.name)
    return argv, cwd


def imported_missing(command: Command, output: str) -> bool:
    """Whether a failed dry run misses only files the same block's ``rsync`` lines copy
    in from another host (docs/devices.md: a Mac's Metal traces)."""
    includes = [
        w
        for c in command.block
        if c.startswith("rsync ")
        for k, w in enumerate(shlex.split(c))
        if k and shlex.split(c)[k - 1] == "--include" and w != "*/"
    ]
    match = re.search(r"affected files:\n((?:\s+\S+\n?)+)", output)
    if not includes or "Missing input files" not in output or not match:
        return False
    missing = match.group(1).split()
    return all(any(fnmatch.fnmatch(Path(m).name, i) for i in includes) for m in missing)


@pytest.mark.parametrize("command", SNAKEMAKE_COMMANDS, ids=lambda c: f"{c.where()} {c.text}")
def test_snakemake_command_dry_runs(command, copy):
    """Each documented snakemake command builds its DAG as written."""
    argv, cwd = dry_run(command, copy)
    proc = subprocess.run(
        argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300
    )
    if proc.returncode != 0 and not imported_missing(command, proc.stdout):
        pytest.fail(
            f"{command.where()}: `{command.text}` fails as a dry run "
            f"({shlex.join(argv[1:])} in {cwd}):\n{proc.stdout[-3000:]}"
        )
