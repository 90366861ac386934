"""The house rules of the tree's layout, kept by a test so the next feature cannot undo them.

* ``scripts/parity/`` is cut into subpackages by stage, each on a floor: a subpackage imports
  only from floors below it (the floor of each is :data:`FLOORS`, the order
  docs/architecture.md's module map lists them in; a package nested in a subpackage, such
  as ``probe/shapes/``, is on its parent's floor), and no module imports another that
  imports it back, directly or through others (function-level imports included, since
  they are how circles used to hide);
* a subpackage's ``__init__.py`` holds only its docstring (``parity.core.codeversion``
  counts a package's ``__init__`` in the code hash of every module inside it, so an import
  there would rerun the whole stage on any edit), except the framework registry;
* no Python module and no Rust source file outside tests is over 500 lines, but the few
  :data:`LONG_FILES` names, each with the reason it is one concern all the same (an entry
  whose file is gone or back within the cap fails, so the list stays short and true);
* the Rust crates have no import circles between their modules;
* Rust code (crates, their tests, the own-model examples) calls ``std::env::temp_dir()``
  only inside the ``impl`` of a guard type whose ``Drop`` removes the folder
  (``remove_dir_all``), so a test run leaves no folder behind in the system's temporary
  directory, a failed test included;
* ``rules/common.smk`` holds only what every stage needs (under 350 lines); each stage's
  input functions sit in its own rule file.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PARITY = REPO / "scripts" / "parity"
RUST = REPO / "rust"
MAX_LINES = 500
COMMON_SMK_MAX_LINES = 350

#: Each subpackage's floor: it may import from lower floors and its own, never higher ones
#: or another subpackage of its own floor.
FLOORS = {
    "core": 0,
    "plan": 1,
    "render": 1,
    "trace": 2,
    "train": 3,
    "compare": 3,
    "localise": 4,
    "probe": 4,
    "detection": 4,
    "own": 2.5,
    "fuzz": 5,
    "adapters": 5,
    "remote": 5,
    "report": 6,
    "analysis": 6,
}
#: ``__init__.py`` files that may hold code: the framework registry gathers its modules.
REGISTRIES = {"scripts/parity/plan/frameworks/__init__.py"}
#: Files over :data:`MAX_LINES` that stay one file, and why (the line cap detects a module
#: holding more than one concern; these hold one). Each must exist and exceed the cap.
LONG_FILES = {
    "scripts/parity/core/warm.py": (
        "one concern: the warm server, its client and the allocator setting its forks start "
        "with (the server runs this file alone, importing none of the project's modules)"
    ),
}


# ----- Python --------------------------------------------------------------------------


def module_name(path: Path) -> str:
    rel = path.relative_to(PARITY.parent).with_suffix("")
    return ".".join(p for p in rel.parts if p != "__init__")


def python_modules() -> dict[str, Path]:
    return {module_name(p): p for p in PARITY.rglob("*.py") if "__pycache__" not in p.parts}


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The ``parity`` modules one module imports, at any depth of its code (function-level
    imports included), resolved to modules (``from parity.core import paths`` →
    ``parity.core.paths``)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name in modules}
        elif isinstance(node, ast.ImportFrom):
            source = node.module or ""
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
                source = ".".join([*base, *([source] if source else [])])
            if not source.startswith("parity"):
                continue
            for a in node.names:
                target = f"{source}.{a.name}"
                found.add(target if target in modules else source)
    return {m for m in found if m in modules and m != name}


def python_graph() -> dict[str, set[str]]:
    modules = python_modules()
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected component of more than one node (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def subpackage(module: str) -> str | None:
    """The top-level subpackage whose floor ``module`` is on (``parity.probe.shapes.table`` →
    ``probe``: a nested package is on its parent's floor), or None for the top package."""
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and parts[1] in FLOORS) else None


def test_every_subpackage_has_a_floor():
    on_disk = {p.parent.name for p in PARITY.glob("*/__init__.py")}
    assert on_disk == set(FLOORS), f"subpackages without a floor or gone: {on_disk ^ set(FLOORS)}"
    loose = sorted(p.name for p in PARITY.glob("*.py") if p.name != "__init__.py")
    assert not loose, f"modules outside any subpackage: {loose}"


def test_a_nested_package_is_on_its_parents_floor():
    assert subpackage("parity.probe.shapes.table") == "probe"
    assert subpackage("parity.probe.shapes") == "probe"
    assert subpackage("parity.probe") == "probe"
    assert subpackage("parity") is None
    nested = sorted(module_name(p) for p in PARITY.glob("*/*/__init__.py"))
    assert "parity.probe.shapes" in nested and "parity.fuzz.generators" in nested
    assert all(subpackage(m) in FLOORS for m in nested)


def test_no_python_module_imports_itself_back():
    found = cycles(python_graph())
    assert not found, f"import circles: {found}"


def test_each_subpackage_imports_only_from_lower_floors():
    wrong = []
    for module, targets in python_graph().items():
        here = subpackage(module)
        for target in targets:
            there = subpackage(target)
            if here is None or there is None or here == there:
                continue
            if FLOORS[there] >= FLOORS[here]:
                wrong.append(f"{module} (floor {FLOORS[here]}) imports {target} ({FLOORS[there]})")
    assert not wrong, "imports from the same or a higher floor:\n" + "\n".join(sorted(wrong))


def test_subpackage_inits_hold_only_their_docstring():
    with_code = []
    for init in PARITY.rglob("__init__.py"):
        rel = init.relative_to(REPO).as_posix()
        if init.parent == PARITY or rel in REGISTRIES:
            continue
        body = ast.parse(init.read_text(encoding="utf-8")).body
        if not (len(body) == 1 and isinstance(body[0], ast.Expr)):
            with_code.append(rel)
    assert not with_code, f"__init__.py files with code (widen every code hash): {with_code}"


def test_the_cycle_finder_finds_a_two_module_circle():
    assert cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def line_count(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def long_files(paths) -> list[str]:
    """The files of ``paths`` over :data:`MAX_LINES`, but those :data:`LONG_FILES` exempts."""
    out = []
    for p in paths:
        rel = p.relative_to(REPO).as_posix()
        n = line_count(p)
        if n > MAX_LINES and rel not in LONG_FILES:
            out.append(f"{rel} ({n})")
    return sorted(out)


def exemption_problems(exemptions: dict[str, str]) -> list[str]:
    """What is wrong with line-cap ``exemptions`` (path → reason): a path that is not a file,
    a file within the cap, an empty reason."""
    wrong = []
    for rel, reason in sorted(exemptions.items()):
        path = REPO / rel
        if not path.is_file():
            wrong.append(f"{rel}: no such file")
        elif line_count(path) <= MAX_LINES:
            wrong.append(f"{rel}: {line_count(path)} lines, within the cap")
        if not reason.strip():
            wrong.append(f"{rel}: no reason given")
    return wrong


def test_each_long_file_exemption_is_a_long_file_with_a_reason():
    wrong = exemption_problems(LONG_FILES)
    assert not wrong, "remove or fix these line-cap exemptions:\n" + "\n".join(wrong)


def test_the_exemption_check_finds_a_short_a_missing_and_an_unexplained_file():
    short = "scripts/parity/core/paths.py"
    given = {short: "why", "scripts/gone.py": "why", **dict.fromkeys(LONG_FILES, " ")}
    assert exemption_problems(given) == [
        "scripts/gone.py: no such file",
        f"{short}: {line_count(REPO / short)} lines, within the cap",
        *(f"{rel}: no reason given" for rel in sorted(LONG_FILES)),
    ]


def test_no_python_module_is_over_500_lines():
    files = [p for p in (REPO / "scripts").rglob("*.py") if "__pycache__" not in p.parts]
    assert not long_files(files), f"split by concern: {long_files(files)}"


# ----- Rust ----------------------------------------------------------------------------


def rust_sources(crate: Path) -> list[Path]:
    return sorted((crate / "src").rglob("*.rs"))


def is_test_file(path: Path) -> bool:
    """A file that holds only tests: under a ``tests`` folder or named ``tests.rs``."""
    return "tests" in path.parts or path.name == "tests.rs"


def rust_crates() -> list[Path]:
    return sorted(p.parent for p in RUST.glob("*/Cargo.toml") if (p.parent / "src").is_dir())


def rust_module_path(crate: Path, file: Path) -> str:
    """``crate::probe::ops`` for ``src/probe/ops.rs`` (``mod.rs``, ``lib.rs`` and
    ``main.rs`` name their folder's module)."""
    rel = file.relative_to(crate / "src").with_suffix("")
    parts = list(rel.parts)
    if parts[-1] in ("mod", "lib", "main"):
        parts = parts[:-1]
    return "::".join(["crate", *parts])


USE = re.compile(r"\b(?:use|pub use|pub\(crate\) use)\s+((?:crate|super|self)::[^;]+);")


def rust_uses(module: str, text: str, modules: set[str]) -> set[str]:
    """The modules of the same crate one file names in its ``use`` items (braced lists
    expanded one level; ``super``/``self`` resolved), each the longest module prefix of the
    path, outside ``#[cfg(test)]`` modules."""
    text = re.split(r"#\[cfg\(test\)\]", text)[0]
    found = set()
    for m in USE.finditer(text):
        path = re.sub(r"\s+", "", m.group(1))
        head, _, braces = path.partition("::{")
        tails = [t for t in braces.rstrip("}").split(",")] if braces else [""]
        for tail in tails:
            full = f"{head}::{tail}" if tail else head
            parts = full.split("::")
            base = module.split("::")
            while parts and parts[0] in ("super", "self"):
                if parts.pop(0) == "super":
                    base = base[:-1]
            if parts and parts[0] == "crate":
                parts, base = parts[1:], ["crate"]
            candidate = base + parts
            while candidate and "::".join(candidate) not in modules:
                candidate = candidate[:-1]
            target = "::".join(candidate)
            if target and target != module and target != "crate":
                found.add(target)
    return found


@pytest.mark.parametrize("crate", rust_crates(), ids=lambda p: p.name)
def test_no_rust_module_imports_itself_back(crate):
    files = {rust_module_path(crate, f): f for f in rust_sources(crate) if not is_test_file(f)}
    modules = set(files)
    graph = {
        m: {t for t in rust_uses(m, f.read_text(encoding="utf-8"), modules) if m != t}
        for m, f in files.items()
    }
    # a parent module declares its children (mod x;), which is not an import
    graph = {m: {t for t in ts if not t.startswith(m + "::")} for m, ts in graph.items()}
    assert not cycles(graph), f"{crate.name}: import circles {cycles(graph)}"


def test_the_rust_use_reader_resolves_super_and_braces():
    modules = {"crate::probe", "crate::probe::ops", "crate::probe::args", "crate::model"}
    text = "use super::args::{Args, same_shape};\nuse crate::model::Net;\nuse std::fmt;"
    assert rust_uses("crate::probe::ops", text, modules) == {"crate::probe::args", "crate::model"}


def test_no_rust_source_outside_tests_is_over_500_lines():
    files = [f for crate in rust_crates() for f in rust_sources(crate) if not is_test_file(f)]
    assert not long_files(files), f"split by concern: {long_files(files)}"


#: String literals, char literals and comments, blanked before the Rust code is read (a
#: ``{`` in a string or a ``temp_dir()`` in a doc comment is not code).
RUST_NOT_CODE = re.compile(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])\'|//[^\n]*|/\*.*?\*/', re.S)
RUST_IMPL = re.compile(r"\bimpl\s+(Drop\s+for\s+)?(\w+)\s*\{")


def rust_blocks(code: str) -> list[tuple[bool, str, int, int]]:
    """``(is_drop, type, start, end)`` of each ``impl T {`` / ``impl Drop for T {`` block."""
    out = []
    for m in RUST_IMPL.finditer(code):
        depth, i = 0, m.end() - 1
        for i in range(m.end() - 1, len(code)):
            depth += {"{": 1, "}": -1}.get(code[i], 0)
            if depth == 0:
                break
        out.append((bool(m.group(1)), m.group(2), m.start(), i))
    return out


def unguarded_temp_dirs(text: str) -> list[int]:
    """Lines of the ``temp_dir()`` calls in Rust source ``text`` that are not inside the
    ``impl`` of a type whose ``impl Drop`` calls ``remove_dir_all``."""
    code = RUST_NOT_CODE.sub(lambda m: re.sub(r"[^\n]", " ", m.group()), text)
    blocks = rust_blocks(code)
    guards = {t for drop, t, a, b in blocks if drop and "remove_dir_all" in code[a:b]}
    return [
        code.count("\n", 0, m.start()) + 1
        for m in re.finditer(r"\btemp_dir\s*\(\s*\)", code)
        if not any(not drop and t in guards and a < m.start() < b for drop, t, a, b in blocks)
    ]


def test_the_temp_dir_reader_tells_a_guard_from_a_leak():
    guard = (
        "struct T(PathBuf);\nimpl T {\n    fn new() -> Self {\n"
        '        let d = std::env::temp_dir().join(format!("x-{}", 1));\n'
        "        Self(d)\n    }\n}\n"
        "impl Drop for T {\n    fn drop(&mut self) {\n"
        "        let _ = std::fs::remove_dir_all(&self.0);\n    }\n}\n"
    )
    assert unguarded_temp_dirs(guard) == []
    # The burn tests' old per-process folder, never removed; a doc comment does not count.
    leak = '/// uses temp_dir()\nfn dir() -> PathBuf {\n    std::env::temp_dir().join("y")\n}\n'
    assert unguarded_temp_dirs(leak) == [3]
    # A Drop that does not remove the folder is no guard.
    assert unguarded_temp_dirs(guard.replace("remove_dir_all", "remove_file")) == [4]
    # Removed at the end of the test only: a failed assertion leaves the folder.
    inline = "fn t() {\n    let d = temp_dir();\n    std::fs::remove_dir_all(&d).unwrap();\n}\n"
    assert unguarded_temp_dirs(inline) == [2]


def test_rust_temporary_folders_are_removed_on_drop():
    files = [
        f
        for top in (RUST, REPO / "examples")
        for f in sorted(top.rglob("*.rs"))
        if "target" not in f.relative_to(REPO).parts
    ]
    assert any("temp_dir()" in f.read_text(encoding="utf-8") for f in files)
    leaks = [
        f"{f.relative_to(REPO)}:{line}"
        for f in files
        for line in unguarded_temp_dirs(f.read_text(encoding="utf-8"))
    ]
    assert not leaks, f"temp_dir() outside a guard removed on drop (see TempDir): {leaks}"


# ----- rules ---------------------------------------------------------------------------


def test_common_smk_holds_only_what_every_stage_needs():
    n = len((REPO / "rules" / "common.smk").read_text(encoding="utf-8").splitlines())
    assert n < COMMON_SMK_MAX_LINES, f"rules/common.smk has {n} lines; move stage code out"
