"""The frame stream between the Rust runners and the trace writer."""

import io
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
