"""The working folder's record of code versions and probe files (parity.core.memo): what it
returns is what computing gives, an edit of the code or of a probe file is seen, and a
missing, damaged or unwritable record only costs time."""

import json
import os
import shutil

import pytest

from parity.core import codeversion, memo
from parity.probe import loader
from parity.probe.format import ProbeError

from conftest import REPO

PROBE = REPO / "probes" / "conv1d_grad.yaml"
SCRIPT = str(REPO / "scripts" / "compare.py")


def fresh(tmp_path, stamp="s1"):
    return memo.Memo(tmp_path, stamp)


def test_a_recorded_probe_is_the_probe_read_afresh(tmp_path, monkeypatch):
    probe = loader.load(PROBE)
    m = fresh(tmp_path)
    first = loader.load(PROBE, memo=m)
    assert first == probe and not (tmp_path / memo.RECORD).exists()
    m.save()
    record = json.loads((tmp_path / memo.RECORD).read_text())
    assert record["format"] == memo.FORMAT and record["stamp"] == "s1"
    assert list(record["probes"].values()) == [probe.spec]

    def no_parse(*a, **k):
        raise AssertionError("parsed again")

    monkeypatch.setattr(loader, "parse", no_parse)
    assert loader.load(PROBE, memo=fresh(tmp_path)) == probe


def test_an_edited_probe_file_is_read_again_whatever_its_time(tmp_path):
    path = tmp_path / "probes" / "p.yaml"
    path.parent.mkdir()
    shutil.copy(PROBE, path)
    m = fresh(tmp_path)
    before = loader.load(path, memo=m)
    m.save()
    st = path.stat()
    # The same size and modification time: only the bytes tell.
    text = path.read_text()
    i = text.index("description: ") + len("description: ")
    path.write_text(text[:i] + "X" + text[i + 1 :])
    assert path.stat().st_size == st.st_size
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    after = loader.load(path, memo=fresh(tmp_path))
    assert after.spec["description"].startswith("X") and after != before
    assert after == loader.load(path)


def test_a_code_edit_gives_another_stamp_and_the_record_starts_afresh(tmp_path):
    root = tmp_path / "wf"
    (root / "scripts" / "parity").mkdir(parents=True)
    (root / "schemas").mkdir()
    module = root / "scripts" / "parity" / "m.py"
    module.write_text("x = 1\n")
    stamp = memo.code_stamp(root)
    assert memo.code_stamp(root) == stamp
    module.write_text("x = 2\n")
    os.utime(module, ns=(1, 1))
    edited = memo.code_stamp(root)
    assert edited != stamp
    (root / "scripts" / "parity" / "n.py").write_text("")  # a new module
    assert memo.code_stamp(root) not in (stamp, edited)

    calls = []
    m = fresh(tmp_path, stamp)
    m.get("code", "a.py", lambda: calls.append(1) or "h1")
    m.save()
    assert fresh(tmp_path, stamp).get("code", "a.py", lambda: "never") == "h1"
    assert fresh(tmp_path, edited).get("code", "a.py", lambda: "h2") == "h2"
    assert calls == [1]


def test_a_recorded_code_version_is_the_computed_one(tmp_path):
    plain = codeversion.code_version(SCRIPT)
    m = fresh(tmp_path)
    assert codeversion.code_version(SCRIPT, m) == plain
    m.save()
    record = json.loads((tmp_path / memo.RECORD).read_text())
    assert record["code"] == {"scripts/compare.py": plain}
    assert codeversion.code_version(SCRIPT, fresh(tmp_path)) == plain


@pytest.mark.parametrize(
    "content",
    ["{not json", '{"format": 1, "stamp": "s1", "code": 3}', "[]", "", "[" * 100_000],
)
def test_a_damaged_record_is_ignored(tmp_path, content):
    (tmp_path / memo.RECORD).parent.mkdir(parents=True)
    (tmp_path / memo.RECORD).write_text(content)
    m = fresh(tmp_path)
    assert loader.load(PROBE, memo=m) == loader.load(PROBE)
    m.save()
    assert json.loads((tmp_path / memo.RECORD).read_text())["stamp"] == "s1"


def test_an_unwritable_record_only_costs_time(tmp_path):
    # A record path that cannot be replaced (a folder there; a read-only folder does the
    # same for users other than root).
    (tmp_path / memo.RECORD).mkdir(parents=True)
    m = fresh(tmp_path)
    assert loader.load(PROBE, memo=m) == loader.load(PROBE)
    assert codeversion.code_version(SCRIPT, m) == codeversion.code_version(SCRIPT)
    m.save()


def test_a_refused_probe_file_is_not_recorded_and_refused_again(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(PROBE.read_text().replace("cases:", "cases_typo:", 1))
    for _ in range(2):
        m = fresh(tmp_path)
        with pytest.raises(ProbeError):
            loader.load(path, memo=m)
        m.save()
    assert not (tmp_path / memo.RECORD).exists()


def test_entries_the_run_did_not_use_are_dropped_at_the_next_write(tmp_path):
    m = fresh(tmp_path)
    m.get("code", "a", lambda: "1")
    m.get("code", "b", lambda: "2")
    m.save()
    m = fresh(tmp_path)
    m.get("code", "a", lambda: "never")
    m.get("code", "c", lambda: "3")
    m.save()
    assert json.loads((tmp_path / memo.RECORD).read_text())["code"] == {"a": "1", "c": "3"}


def workflow_folder(tmp_path):
    """A workflow folder with one module, scripts/parity/m.py, and an empty schemas/."""
    root = tmp_path / "wf"
    (root / "scripts" / "parity").mkdir(parents=True)
    (root / "schemas").mkdir()
    (root / "scripts" / "parity" / "m.py").write_text("x = 1\n")
    return root


def test_an_edit_that_keeps_size_and_times_gives_another_stamp(tmp_path):
    # A file system with coarse times, or a copy or archive with normalized times: the
    # code changes, its size and modification time do not. A stale stamp here would keep
    # the old code version, and the jobs of the edited code would not rerun.
    root = workflow_folder(tmp_path)
    module = root / "scripts" / "parity" / "m.py"
    st, folder = module.stat(), module.parent.stat()
    stamp = memo.code_stamp(root)
    module.write_text("x = 2\n")
    os.utime(module, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.utime(module.parent, ns=(folder.st_atime_ns, folder.st_mtime_ns))
    assert memo.code_stamp(root) != stamp
    module.write_text("x = 1\n")
    assert memo.code_stamp(root) == stamp


def test_another_python_or_library_version_gives_another_stamp(tmp_path, monkeypatch):
    # The probe entries are what PyYAML and jsonschema made of the files.
    root = workflow_folder(tmp_path)
    site = tmp_path / "site"
    (site / "fakelib").mkdir(parents=True)
    (site / "fakelib" / "__init__.py").write_text("")
    (site / "fakelib-1.0.dist-info").mkdir()
    monkeypatch.syspath_prepend(str(site))
    stamp = memo.code_stamp(root, names=("fakelib",))
    assert memo.libraries(("fakelib",))[1:] == ["fakelib-1.0.dist-info"]
    assert memo.code_stamp(root, names=("fakelib",)) == stamp
    (site / "fakelib-1.0.dist-info").rename(site / "fakelib-1.1.dist-info")
    upgraded = memo.code_stamp(root, names=("fakelib",))
    assert upgraded != stamp
    monkeypatch.setattr(memo.sys, "version", "3.99.0 (another build)")
    assert memo.code_stamp(root, names=("fakelib",)) not in (stamp, upgraded)
    assert memo.libraries(("no_such_package_here",)) == [memo.sys.version]


def test_a_dangling_link_or_editor_lock_does_not_stop_a_start(tmp_path):
    # Emacs marks a file being edited with `.#name`, a link to a target that does not
    # exist; a start while it is there must not fail on it.
    root = workflow_folder(tmp_path)
    stamp = memo.code_stamp(root)
    (root / "scripts" / "parity" / ".#m.py").symlink_to("user@host.123:1700000000")
    assert memo.code_stamp(root) == stamp
    (root / "scripts" / "parity" / "gone.py").symlink_to(root / "missing.py")
    assert memo.code_stamp(root) not in (stamp, None)


def test_new_entries_are_written_once_not_once_each(tmp_path, monkeypatch):
    # A start after a code edit computes every entry again; one write per entry cost it
    # about 1 ms each.
    writes = []
    real = memo.write_text_atomic
    monkeypatch.setattr(memo, "write_text_atomic", lambda p, t: writes.append(p) or real(p, t))
    registered = []
    monkeypatch.setattr(memo.atexit, "register", registered.append)
    m = fresh(tmp_path)
    assert registered == [m.save]  # what was computed after the Snakefile's save is kept
    for key in "abc":
        m.get("code", key, lambda key=key: key * 2)
    assert writes == []
    m.save()
    m.save()
    assert writes == [tmp_path / memo.RECORD]
    m = fresh(tmp_path)
    assert [m.get("code", k, lambda: "never") for k in "abc"] == ["aa", "bb", "cc"]
    m.save()  # nothing new
    assert len(writes) == 1


def test_a_linked_folder_is_followed_and_a_cycle_ends(tmp_path):
    # `scripts/parity/vendor` a link to a folder elsewhere: code_version hashes the modules
    # imported through it, so an edit there must give another stamp.
    root = workflow_folder(tmp_path)
    other = tmp_path / "vendor"
    other.mkdir()
    (other / "v.py").write_text("a = 1\n")
    (root / "scripts" / "parity" / "vendor").symlink_to(other, target_is_directory=True)
    (other / "loop").symlink_to(root / "scripts", target_is_directory=True)
    stamp = memo.code_stamp(root)
    (other / "v.py").write_text("a = 2\n")
    assert memo.code_stamp(root) != stamp


def test_a_folder_removed_while_walked_does_not_stop_a_start(tmp_path, monkeypatch):
    # A start while `git checkout` removes a folder: os.walk listed it, it is gone.
    root = workflow_folder(tmp_path)
    stamp = memo.code_stamp(root)
    walk = os.walk

    def walk_with_a_gone_folder(top, **kwargs):
        yield os.path.join(top, "gone"), [], ["x.py"]
        yield from walk(top, **kwargs)

    monkeypatch.setattr(memo.os, "walk", walk_with_a_gone_folder)
    assert memo.code_stamp(root) == stamp


def test_a_config_key_is_given_only_where_json_gives_the_config_back():
    assert memo.json_key({"b": [1, 2.5], "a": {"x": None}}) == memo.json_key(
        {"a": {"x": None}, "b": [1, 2.5]}
    )
    for bad in ({"a": float("nan")}, {"a": (1, 2)}, {1: "a"}, {"a": {1, 2}}):
        assert memo.json_key(bad) is None, bad


def test_a_recorded_config_is_the_validated_one_and_a_bad_one_is_refused_again(tmp_path):
    from snakemake.exceptions import WorkflowError
    from snakemake.utils import validate

    from conftest import load_config

    schema = str(REPO / "schemas" / "config.schema.json")

    def validated(c):
        validate(c, schema)
        return c

    given = load_config()
    expected = validated(json.loads(json.dumps(given)))
    key = memo.json_key(given)
    m = fresh(tmp_path)
    got = m.get("config", key, lambda: validated(json.loads(json.dumps(given))))
    m.save()
    assert got == expected
    assert fresh(tmp_path).get("config", key, lambda: "never") == expected
    bad = load_config()
    bad["tolerance"] = -1.0
    for _ in range(2):
        with pytest.raises(WorkflowError):
            fresh(tmp_path).get("config", memo.json_key(bad), lambda: validated(bad))
