"""The frame stream between the Rust runners and the trace writer."""

import io
import json
import struct

import numpy as np
import pytest
from safetensors.numpy import save

from parity.trace.frames import FrameError, read_frames


def frame(meta, tensors=None):
    body = save(tensors or {}, metadata=meta)
    return struct.pack("<Q", len(body)) + body


def test_frames_decode_in_order_with_tensors():
    data = frame({"kind": "header", "framework": "candle"}) + frame(
        {"kind": "step", "step": "1"},
        {"loss": np.array([0.5]), "w": np.arange(3, dtype=np.float32)},
    )
    frames = list(read_frames(io.BytesIO(data)))
    assert [f.kind for f in frames] == ["header", "step"]
    assert frames[0].tensors == {}
    assert frames[1].tensors["w"].tolist() == [0.0, 1.0, 2.0]


def test_truncated_stream_is_an_error():
    data = frame({"kind": "step", "step": "0"}, {"w": np.zeros(4, np.float32)})
    with pytest.raises(FrameError, match="ends inside a frame"):
        list(read_frames(io.BytesIO(data[:-3])))


def test_frame_without_kind_is_an_error():
    with pytest.raises(FrameError, match="no 'kind'"):
        list(read_frames(io.BytesIO(frame({"step": "0"}))))


def test_a_frame_longer_than_the_caller_expects_is_refused_before_it_is_read():
    data = frame({"kind": "step", "step": "0"}, {"w": np.zeros(1000, np.float32)})
    with pytest.raises(FrameError, match=r"implausible \(at most 100 expected\)"):
        list(read_frames(io.BytesIO(data), max_frame=100))
    # a corrupted length of 2^40 bytes: refused, nothing allocated
    huge = struct.pack("<Q", 1 << 40) + data[8:]
    with pytest.raises(FrameError, match="implausible"):
        list(read_frames(io.BytesIO(huge), max_frame=1 << 20))


def test_decoded_arrays_equal_safetensors_own_loader_and_are_views_of_the_frame():
    from safetensors.numpy import load

    rng = np.random.default_rng(0)
    tensors = {
        "loss": np.array([0.25]),
        "fc1.weight": rng.standard_normal((3, 4)).astype(np.float32),
        "grad:fc1.weight": rng.standard_normal((3, 4)).astype(np.float32),
        "half": rng.standard_normal(5).astype(np.float16),
        "ids": np.arange(6, dtype=np.int64).reshape(2, 3),
        "mask": np.array([True, False]),
        "bytes": np.arange(7, dtype=np.uint8),
        "empty": np.zeros((0, 3), np.float32),
        "scalar": np.array(1.5, np.float64),
    }
    body = save(tensors, metadata={"kind": "step", "step": "3"})
    (decoded,) = read_frames(io.BytesIO(struct.pack("<Q", len(body)) + body))
    want = load(body)
    assert decoded.meta == {"kind": "step", "step": "3"}
    assert sorted(decoded.tensors) == sorted(want)
    for name, value in want.items():
        got = decoded.tensors[name]
        assert got.dtype == value.dtype and got.shape == value.shape, name
        assert got.tobytes() == value.tobytes(), name
        assert got.flags.writeable, name

    # no copy: every array's memory lies inside the frame's one buffer
    def owner(a):
        while isinstance(a, np.ndarray):
            a = a.base
        return a.obj  # the memoryview's exporter

    owners = {id(owner(t)) for t in decoded.tensors.values()}
    assert len(owners) == 1 and isinstance(owner(decoded.tensors["loss"]), bytearray)


def _raw_frame(header: dict, data: bytes) -> bytes:
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    body = struct.pack("<Q", len(text)) + text + data
    return struct.pack("<Q", len(body)) + body


@pytest.mark.parametrize(
    "entries, data, message",
    [
        ({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}}, b"\0" * 4, "need 8"),
        ({"w": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, b"\0" * 8, "from 0"),
        ({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}, b"\0" * 6, "2 bytes after"),
        ({"w": {"dtype": "BF16", "shape": [1], "data_offsets": [0, 2]}}, b"\0" * 2, "malformed"),
        ({"w": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}}, b"\0" * 4, "negative"),
        ({"w": {"dtype": "F32", "shape": [1]}}, b"\0" * 4, "malformed"),
        (
            {
                "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                "b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]},
            },
            b"\0" * 8,
            "tensor 'b'",
        ),
    ],
)
def test_a_malformed_safetensors_body_is_a_frame_error(entries, data, message):
    header = {"__metadata__": {"kind": "step", "step": "1"}, **entries}
    with pytest.raises(FrameError, match=message):
        list(read_frames(io.BytesIO(_raw_frame(header, data))))


@pytest.mark.parametrize(
    "text, message",
    [(b"[1, 2]", "not a JSON object"), (b'{"__metadata__": {"kind": 1}}', "map of strings")],
)
def test_a_header_that_is_not_a_safetensors_header_is_a_frame_error(text, message):
    body = struct.pack("<Q", len(text)) + text
    with pytest.raises(FrameError, match=message):
        list(read_frames(io.BytesIO(struct.pack("<Q", len(body)) + body)))


def test_a_header_length_past_the_frame_is_a_frame_error():
    body = struct.pack("<Q", 1 << 30) + b"{}"
    with pytest.raises(FrameError, match="header of 1073741824 bytes"):
        list(read_frames(io.BytesIO(struct.pack("<Q", len(body)) + body)))
