"""Reader of the frame stream the Rust runners write (``rust/parity-common/src/frames.rs``).

A frame is a little-endian u64 byte count followed by one safetensors buffer; its
``__metadata__`` has ``kind`` (``header``, ``step``, ``result``, ``end``).

A frame's arrays are numpy views of the frame's own buffer (no copy: a recorded step of a
large model is megabytes, and copying it out cost the candle runner's training time on a
2-core machine, docs/performance.md). The buffer is read as safetensors' format defines it
(https://github.com/huggingface/safetensors#format) and checked as its own loader checks it:
a JSON header, every tensor's bytes in order, without gaps or overlaps, their byte count
that of its dtype and shape, nothing after the last; ``tests/test_frames.py`` holds this
decoder to ``safetensors.numpy.load`` on the same buffers.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import BinaryIO

import numpy as np

#: A frame larger than this is refused as corrupt (16 GiB).
MAX_FRAME = 16 << 30

#: safetensors dtype names numpy holds as they are (BF16 and the 8-bit floats have no
#: numpy dtype; the runners widen them before they write a frame). Little-endian, as the
#: format stores them.
DTYPES = {
    "F64": "<f8",
    "F32": "<f4",
    "F16": "<f2",
    "I64": "<i8",
    "I32": "<i4",
    "I16": "<i2",
    "I8": "i1",
    "U64": "<u8",
    "U32": "<u4",
    "U16": "<u2",
    "U8": "u1",
    "BOOL": "?",
}


class FrameError(ValueError):
    """A malformed or truncated frame stream."""


@dataclass
class Frame:
    """One decoded frame: its metadata and its tensors."""

    meta: dict[str, str]
    tensors: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def kind(self) -> str:
        """``header``, ``step``, ``result`` or ``end``."""
        return self.meta.get("kind", "")


def _read_exact(stream: BinaryIO, n: int) -> bytearray:
    """``n`` bytes of ``stream`` read into one new buffer (fewer at its end)."""
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        k = stream.readinto(view[got:])
        if not k:
            break
        got += k
    view.release()
    if got < n:
        del buf[got:]
    return buf


def _tensors(header: dict, data: memoryview) -> dict[str, np.ndarray]:
    """The arrays the safetensors ``header`` describes, as views of ``data`` (the bytes after
    the header). Raises :class:`FrameError` where safetensors' own loader would refuse."""
    entries = []
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype = np.dtype(DTYPES[info["dtype"]])
            shape = [int(d) for d in info["shape"]]
            start, end = (int(o) for o in info["data_offsets"])
        except (KeyError, TypeError, ValueError) as e:
            raise FrameError(f"tensor {name!r}: malformed header entry {info!r}") from e
        if any(d < 0 for d in shape):
            raise FrameError(f"tensor {name!r}: negative dimension in shape {shape}")
        entries.append((start, end, name, dtype, shape))
    entries.sort(key=lambda e: (e[0], e[1]))
    tensors, at = {}, 0
    for start, end, name, dtype, shape in entries:
        count = math.prod(shape)
        if start != at or end - start != count * dtype.itemsize:
            raise FrameError(
                f"tensor {name!r}: bytes {start}..{end} where its dtype and shape {shape} "
                f"need {count * dtype.itemsize} bytes from {at}"
            )
        tensors[name] = np.frombuffer(data, dtype, count, start).reshape(shape)
        at = end
    if at != len(data):
        raise FrameError(f"{len(data) - at} bytes after the frame's last tensor")
    return tensors


def decode(buf: bytes | bytearray) -> Frame:
    """Decode one safetensors buffer into a :class:`Frame` whose arrays are views of
    ``buf`` (writable when ``buf`` is a ``bytearray``). Raises :class:`FrameError`."""
    if len(buf) < 8:
        raise FrameError("frame shorter than its safetensors header length")
    (header_len,) = struct.unpack_from("<Q", buf)
    if header_len > len(buf) - 8:
        raise FrameError(f"safetensors header of {header_len} bytes in a {len(buf)}-byte frame")
    try:
        header = json.loads(bytes(buf[8 : 8 + header_len]))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise FrameError(f"frame header is not JSON ({e})") from e
    if not isinstance(header, dict):
        raise FrameError("frame header is not a JSON object")
    meta = header.get("__metadata__") or {}
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise FrameError("frame metadata is not a map of strings")
    if "kind" not in meta:
        raise FrameError("frame metadata has no 'kind'")
    return Frame(meta, _tensors(header, memoryview(buf)[8 + header_len :]))


def read_frames(stream: BinaryIO, max_frame: int = MAX_FRAME) -> Iterator[Frame]:
    """Yield frames until the stream ends. A partial frame, or one longer than
    ``max_frame`` bytes (the caller knows how large a step can be), raises
    :class:`FrameError` before anything of it is read."""
    while True:
        head = _read_exact(stream, 8)
        if not head:
            return
        if len(head) < 8:
            raise FrameError("stream ends inside a frame length")
        (n,) = struct.unpack("<Q", head)
        if n > max_frame:
            raise FrameError(f"frame length {n} is implausible (at most {max_frame} expected)")
        body = _read_exact(stream, n)
        if len(body) < n:
            raise FrameError(f"stream ends inside a frame ({len(body)} of {n} bytes)")
        yield decode(body)
