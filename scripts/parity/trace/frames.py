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

import io
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


#: Bytes of a stream that starts with text shown in :func:`printed_text`'s hint.
PREVIEW_BYTES = 64


def printed_text(start: bytes | bytearray) -> str | None:
    """When ``start`` (the first bytes of a frame stream) is text rather than a frame length
    (a frame's first 8 bytes are a little-endian count: mostly zero bytes), the hint to add
    to the stream's error: the printable text it starts with and who wrote it. None when it
    does not look like text. Asked only of a stream whose first frame is refused."""
    head = bytes(start[:8])
    run = next((i for i, b in enumerate(head) if not (32 <= b < 127 or b in (9, 10, 13))), 8)
    # text: printable throughout, or a printed line ("ok\n") before the real frame
    if not (run >= min(len(head), 7) >= 2 or (run >= 3 and head[run - 1] == 10)):
        return None
    shown = bytes(start[:PREVIEW_BYTES]).decode("ascii", "replace")
    shown = "".join(c if c.isprintable() or c in "\t\n" else "?" for c in shown)
    more = "…" if len(start) > PREVIEW_BYTES else ""
    return (
        f"the stream starts with text {shown!r}{more}, not a frame: the port (or a library it "
        "calls) writes to the runner's standard output; use eprintln! (standard error goes "
        "to the job's log)"
    )


def _with_text_hint(message: str, start: bytes | bytearray) -> str:
    hint = printed_text(start)
    return f"{message}; {hint}" if hint else message


def read_frames(stream: BinaryIO, max_frame: int = MAX_FRAME) -> Iterator[Frame]:
    """Yield frames until the stream ends. A partial frame, or one longer than
    ``max_frame`` bytes (the caller knows how large a step can be), raises
    :class:`FrameError` before anything of it is read. When the first frame is refused and
    the stream starts with text (something printed to the runner's standard output), the
    error shows that text and says so (:func:`printed_text`)."""
    first = True
    while True:
        head = _read_exact(stream, 8)
        if not head:
            return
        if len(head) < 8:
            raise FrameError(_with_text_hint("stream ends inside a frame length", head))
        (n,) = struct.unpack("<Q", head)
        if n > max_frame:
            message = f"frame length {n} is implausible (at most {max_frame} expected)"
            if first and printed_text(head):
                head += _read_exact(stream, PREVIEW_BYTES)
            raise FrameError(_with_text_hint(message, head) if first else message)
        body = _read_exact(stream, n)
        if len(body) < n:
            message = f"stream ends inside a frame ({len(body)} of {n} bytes)"
            raise FrameError(
                _with_text_hint(message, head + body[:PREVIEW_BYTES]) if first else message
            )
        if not first:
            yield decode(body)
            continue
        try:
            frame = decode(body)
        except FrameError as e:
            raise FrameError(_with_text_hint(str(e), head + body[:PREVIEW_BYTES])) from None
        first = False
        yield frame


def read_buffer(data: bytes | bytearray) -> Iterator[Frame]:
    """:func:`read_frames` of a runner's whole output, already in memory (``data``): a frame
    may be as long as ``data`` itself, past :data:`MAX_FRAME` (a replay's or a probe's
    tensors are bounded by the config's ``limits``, which it may raise that far; the bytes
    are here already, so a frame of them costs no more memory)."""
    return read_frames(io.BytesIO(data), max_frame=max(MAX_FRAME, len(data)))
