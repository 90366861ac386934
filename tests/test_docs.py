"""The documentation stays true to the repository.

* docs/architecture.md's module map lists exactly the modules, rule files and crates that
  exist: every ``scripts/parity/**/*.py`` except the top package's ``__init__.py``, every
  ``rules/*.smk`` and every crate folder under ``rust/`` (a folder with a ``Cargo.toml``);
* README.md is a front page: at most 250 lines, opening with the two commands CI runs;
* no tracked file outside tests/ points at a specification outside the repository;
* every relative link in README.md and docs/*.md reaches a file (and heading) that exists,
  and the front page lists every docs/ page.
"""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
DOCS = REPO / "docs"
ARCHITECTURE = DOCS / "architecture.md"

README_MAX_LINES = 250
#: The front page's first code block, verbatim: what CI runs (.ci/run runs the second).
FRONT_PAGE_COMMANDS = [
    (
        "scripts/dev/bootstrap && .venv/bin/snakemake --cores 8    "
        "# set up, then run the default workflow"
    ),
    (
        "scripts/dev/bootstrap --test && scripts/dev/test          "
        "# set up, then run every check and test"
    ),
]
#: Pointers to a specification kept outside the repository; the docs/ pages replace it.
OUTSIDE_POINTERS = ("../shared", "shared/SPEC")

FENCE = re.compile(r"^```.*?^```[^\n]*$", re.MULTILINE | re.DOTALL)
INLINE_CODE = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"!?\[(?:[^\]\\]|\\.)*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)


# ----- the module map ------------------------------------------------------------------


def module_map_rows(text: str) -> list[str]:
    """First-column paths of the table under the ``## Module map`` heading, in order."""
    match = re.search(r"^## Module map\s*$(.*?)(?=^## |\Z)", text, re.MULTILINE | re.DOTALL)
    assert match, "docs/architecture.md has no '## Module map' section"
    rows = []
    for line in match.group(1).splitlines():
        cell = re.match(r"^\|\s*`([^`]+)`\s*\|\s*(.*?)\s*\|\s*$", line)
        if cell:
            assert cell.group(2), f"module map row {cell.group(1)!r} has no purpose"
            rows.append(cell.group(1).rstrip("/"))
    return rows


def docstring_only(init: Path) -> bool:
    """Whether a package's ``__init__.py`` holds nothing but its docstring."""
    body = ast.parse(init.read_text(encoding="utf-8")).body
    return all(isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant) for n in body)


def modules_on_disk() -> set[str]:
    """What the module map must list, as repository-relative paths: every module, every
    subpackage folder (``scripts/parity/core/``, written without the slash), an
    ``__init__.py`` only where it holds more than its docstring, rule files, crates."""
    parity = REPO / "scripts" / "parity"
    found = set()
    for p in parity.rglob("*.py"):
        if p == parity / "__init__.py" or "__pycache__" in p.parts:
            continue
        if p.name == "__init__.py":
            if p.parent.parent == parity:
                found.add(p.parent.relative_to(REPO).as_posix())
            if docstring_only(p):
                continue
        found.add(p.relative_to(REPO).as_posix())
    found |= {p.relative_to(REPO).as_posix() for p in (REPO / "rules").glob("*.smk")}
    rust = REPO / "rust"
    for manifest in rust.rglob("Cargo.toml"):
        rel = manifest.parent.relative_to(rust)
        if rel.parts and "target" not in rel.parts:
            found.add(manifest.parent.relative_to(REPO).as_posix())
    return found


def test_module_map_lists_every_module_rule_file_and_crate():
    rows = module_map_rows(ARCHITECTURE.read_text(encoding="utf-8"))
    duplicates = sorted({r for r in rows if rows.count(r) > 1})
    assert not duplicates, f"docs/architecture.md module map lists twice: {duplicates}"
    listed, present = set(rows), modules_on_disk()
    missing, extra = sorted(present - listed), sorted(listed - present)
    assert not missing and not extra, (
        "docs/architecture.md module map is out of date: "
        f"add rows for {missing or 'nothing'}; remove rows for {extra or 'nothing'}"
    )


def test_module_map_lists_each_module_under_its_subpackage():
    """Each Python module row follows its own subpackage's folder row (the map is grouped
    by stage), and every subpackage has a section of its own."""
    rows = module_map_rows(ARCHITECTURE.read_text(encoding="utf-8"))
    group, misplaced = None, []
    for row in rows:
        if not row.startswith("scripts/parity/"):
            group = None
        elif not row.endswith(".py"):
            group = row
        elif group is None or not row.startswith(group + "/"):
            misplaced.append(f"{row} (under {group or 'no subpackage'})")
    assert not misplaced, f"docs/architecture.md module map: misplaced rows {misplaced}"


def test_module_map_parser_reads_paths_and_stops_at_the_next_section():
    text = (
        "## Module map\n\n| path | purpose |\n|---|---|\n"
        "| `scripts/parity/a.py` | one |\n| `rust/x/` | two |\n\n## After\n\n| `b.py` | no |\n"
    )
    assert module_map_rows(text) == ["scripts/parity/a.py", "rust/x"]


# ----- the front page ------------------------------------------------------------------


def test_readme_is_a_front_page_of_at_most_250_lines():
    n = len(README.read_text(encoding="utf-8").splitlines())
    assert n <= README_MAX_LINES, f"README.md has {n} lines; move detail into docs/"


def test_readme_opens_with_the_two_commands_ci_runs():
    text = README.read_text(encoding="utf-8")
    fence = FENCE.search(text)
    assert fence, "README.md has no code block"
    first_section = re.search(r"^## ", text, re.MULTILINE)
    assert first_section is None or fence.start() < first_section.start(), (
        "README.md's first code block comes after its first section; it must open the page"
    )
    body = fence.group(0).splitlines()[1:-1]
    assert body == FRONT_PAGE_COMMANDS, f"README.md's first code block is {body}"


# ----- no pointers outside the repository ----------------------------------------------


def tracked_files() -> list[str]:
    try:
        out = subprocess.run(
            ["git", "-C", str(REPO), "ls-files", "-z"],
            check=True,
            capture_output=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        pytest.skip(f"git ls-files is not available here: {e}")
    return [p for p in out.decode("utf-8").split("\0") if p]


def test_no_tracked_file_outside_tests_points_at_an_outside_spec():
    offenders = []
    for rel in tracked_files():
        if rel.startswith("tests/"):
            continue
        try:
            data = (REPO / rel).read_bytes()
        except (FileNotFoundError, IsADirectoryError):
            continue  # deleted in the work tree, or a submodule
        if b"\0" in data:
            continue  # binary
        text = data.decode("utf-8", errors="replace")
        for n, line in enumerate(text.splitlines(), 1):
            if any(p in line for p in OUTSIDE_POINTERS):
                offenders.append(f"{rel}:{n}: {line.strip()}")
    assert not offenders, "point at docs/ instead:\n" + "\n".join(offenders)


# ----- links ---------------------------------------------------------------------------


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: markup dropped, lowercase, punctuation removed,
    spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = text.lower().replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a Markdown file, with GitHub's -1, -2 for repeats."""
    seen: dict[str, int] = {}
    out = set()
    for heading in HEADING.findall(FENCE.sub("", path.read_text(encoding="utf-8"))):
        base = slug(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def relative_links(path: Path) -> list[str]:
    """Link and image targets of a Markdown file that are not URLs, outside code."""
    text = INLINE_CODE.sub("code", FENCE.sub("", path.read_text(encoding="utf-8")))
    return [t for t in LINK.findall(text) if not re.match(r"^[a-z][a-z0-9+.-]*:", t, re.I)]


def markdown_pages() -> list[Path]:
    return [README, *sorted(DOCS.glob("*.md"))]


@pytest.mark.parametrize("page", markdown_pages(), ids=lambda p: p.relative_to(REPO).as_posix())
def test_relative_links_reach_existing_files(page):
    broken = []
    for target in relative_links(page):
        file_part, _, anchor = target.partition("#")
        dest = (page.parent / file_part).resolve() if file_part else page
        if not dest.is_relative_to(REPO) or not dest.exists():
            broken.append(f"{target} (no such file in the repository)")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target} (no heading #{anchor} in {dest.name})")
    assert not broken, f"{page.relative_to(REPO)}: broken links: {broken}"


def test_front_page_lists_every_docs_page():
    linked = {
        (README.parent / t.partition("#")[0]).resolve()
        for t in relative_links(README)
        if t.partition("#")[0]
    }
    unlisted = sorted(p.name for p in DOCS.glob("*.md") if p.resolve() not in linked)
    assert not unlisted, f"README.md does not link docs pages {unlisted}"


def test_link_and_anchor_helpers():
    assert slug("Verdicts and `check`") == "verdicts-and-check"
    assert slug("Running on a cluster (Slurm)") == "running-on-a-cluster-slurm"
    assert slug("Where ours differ from the study, and why") == (
        "where-ours-differ-from-the-study-and-why"
    )
    assert slug("Merging another host's traces") == "merging-another-hosts-traces"
