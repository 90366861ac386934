"""Paths a config names are held to what the file system does with them
(``parity.core.userpath``): every way a path can fail is one ConfigError naming the key,
never a bare RuntimeError (``Path.resolve`` on a loop) or a reader blocked on a FIFO.
The workflow's refusals are in tests/test_bad_config.py."""

from __future__ import annotations

import os

import numpy as np
import pytest
from safetensors.numpy import save

from parity.core import userpath
from parity.core.config import ConfigError
from parity.plan.datafile import safetensors_header


def refusal(path, kind="file", base=None) -> str:
    with pytest.raises(ConfigError) as e:
        userpath.check("some.key", path, kind, base)
    assert str(e.value).startswith("config: some.key: ")
    assert "\n" not in str(e.value)
    return str(e.value).removeprefix("config: some.key: ")


def test_each_way_a_path_fails_is_named(tmp_path):
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    (tmp_path / "gone").symlink_to(tmp_path / "nowhere")
    (tmp_path / "f").write_text("x")
    (tmp_path / "d").mkdir()
    os.mkfifo(tmp_path / "pipe")
    assert (
        refusal(tmp_path / "a")
        == f"{tmp_path / 'a'}: a loop of symbolic links (the file system cannot follow it)"
    )
    assert refusal(tmp_path / "a" / "x", "folder").endswith(
        ": a loop of symbolic links (the file system cannot follow it)"
    )
    assert refusal(tmp_path / "gone") == (
        f"{tmp_path / 'gone'}: a broken symbolic link (to {tmp_path / 'nowhere'}, which does "
        "not exist)"
    )
    assert refusal("missing", base=tmp_path) == f"missing ({tmp_path / 'missing'}): does not exist"
    assert refusal(tmp_path / "f" / "x").endswith(
        ": does not exist (a part of the path is a file, not a folder)"
    )
    assert refusal(tmp_path / "d").endswith(": is a folder, not a file")
    assert refusal(tmp_path / "f", "folder").endswith(": is a file, not a folder")
    assert refusal(tmp_path / "pipe").endswith(
        ": is not a regular file (a device, a FIFO or a socket), not a file"
    )


def test_a_path_that_resolves_comes_back_resolved(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "m.py").write_text("x")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    got = userpath.check("k", "link/../real/m.py", "file", tmp_path)
    assert got == (tmp_path / "real" / "m.py").resolve()
    assert userpath.check("k", "link", "folder", tmp_path) == (tmp_path / "real").resolve()


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads every file")
def test_an_unreadable_file_is_named(tmp_path):
    f = tmp_path / "secret"
    f.write_text("x")
    f.chmod(0)
    assert refusal(f).endswith(": cannot be read (Permission denied)")


def _file(tmp_path, tensors) -> os.PathLike:
    p = tmp_path / "d.safetensors"
    p.write_bytes(save(tensors))
    return p


def test_the_data_files_header_is_read_as_safetensors_reads_it(tmp_path):
    x, y = np.ones((2, 3, 4), np.float32), np.arange(6, dtype=np.int64).reshape(2, 3)
    p = _file(tmp_path, {"x": x, "y": y})
    assert safetensors_header(p) == {
        "x": {"dtype": "F32", "shape": [2, 3, 4]},
        "y": {"dtype": "I64", "shape": [2, 3]},
    }
    data = p.read_bytes()
    p.write_bytes(data + b"\0")
    with pytest.raises(ValueError, match="its tensors hold 144 bytes, the file 145 after"):
        safetensors_header(p)
    n = int.from_bytes(data[:8], "little")
    for header, message in [
        (b"[]", "its header is a JSON list, not an object"),
        (b'{"x": 1}', "tensor 'x': its header entry is not an object"),
        (b'{"x": {"dtype": "F7", "shape": [1], "data_offsets": [0, 4]}}', "dtype 'F7' is not"),
        (b'{"x": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}}', "is not a list of"),
        (b'{"x": {"dtype": "F32", "shape": [1], "data_offsets": [0]}}', "are not two integers"),
        (b'{"x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}}', "need 8 bytes from 0"),
        (b'{"__metadata__": {"a": 1}}', "its __metadata__ is not a map of strings"),
        (b"{not json", "its header is not JSON"),
    ]:
        p.write_bytes(len(header).to_bytes(8, "little") + header + b"\0" * 4)
        with pytest.raises(ValueError, match=message):
            safetensors_header(p)
    p.write_bytes(data[:8] + data[8 : 8 + n // 2])
    with pytest.raises(ValueError, match="declares a header of"):
        safetensors_header(p)


def test_a_ports_parity_common_entry_is_checked_by_type_before_its_value(tmp_path):
    """The build reads the port's Cargo.toml (``build_own.check_port``): a value of the
    wrong type is named with the line to write, never an AttributeError or TypeError."""
    from parity.plan.own import RUST_DIR, port_manifest_problem

    ours = (RUST_DIR / "parity-common").resolve()
    good = {"path": str(ours), "features": ["candle"]}
    assert (
        port_manifest_problem({"dependencies": {"parity-common": good}}, tmp_path, "candle") is None
    )
    for doc in [
        {},
        {"dependencies": 3},
        {"dependencies": {"parity-common": "1.0"}},
        {"dependencies": {"parity-common": {"path": 5}}},
    ]:
        why = port_manifest_problem(doc, tmp_path, "candle")
        assert why.startswith("the port must depend on this workflow's parity-common"), doc
        assert f'parity-common = {{ path = "{ours}", features = ["candle"] }}' in why
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    why = port_manifest_problem(
        {"dependencies": {"parity-common": {"path": "loop"}}}, tmp_path, "candle"
    )
    assert why.startswith(f"parity-common is {tmp_path / 'loop'}, another checkout's")
    for features in ["candle", {"candle": True}, ["burn"]]:
        doc = {"dependencies": {"parity-common": {**good, "features": features}}}
        assert port_manifest_problem(doc, tmp_path, "candle") == (
            'parity-common needs features = ["candle"]'
        )


def test_a_path_starting_with_a_tilde_is_not_expanded_and_the_message_says_so(tmp_path):
    full, why = userpath.reason("~/model.py", "file", tmp_path)
    assert full == str(tmp_path / "~/model.py")
    assert why == (
        "does not exist; a leading ~ is not expanded here: write "
        + os.path.expanduser("~/model.py")
    )
