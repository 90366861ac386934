"""Reader of the frame stream the Rust runners write (``rust/parity-common/src/frames.rs``).

A frame is a little-endian u64 byte count followed by one safetensors buffer; its
``__metadata__`` has ``kind`` (``header``, ``step``, ``result``, ``end``).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import BinaryIO

import numpy as np
from safetensors.numpy import load as load_safetensors

#: A frame larger than this is refused as corrupt (16 GiB).
MAX_FRAME = 16 << 30


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


def _read_exact(stream: BinaryIO, n: int) -> bytes:
    chunks, left = [], n
    while left:
        b = stream.read(left)
        if not b:
            break
        chunks.append(b)
        left -= len(b)
    return b"".join(chunks)


def decode(buf: bytes) -> Frame:
    """Decode one safetensors buffer into a :class:`Frame`. Raises :class:`FrameError`."""
    if len(buf) < 8:
        raise FrameError("frame shorter than its safetensors header length")
    (header_len,) = struct.unpack("<Q", buf[:8])
    try:
        header = json.loads(buf[8 : 8 + header_len])
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise FrameError(f"frame header is not JSON ({e})") from e
    meta = header.get("__metadata__") or {}
    if "kind" not in meta:
        raise FrameError("frame metadata has no 'kind'")
    tensors = load_safetensors(buf) if len(header) > 1 else {}
    return Frame(meta, tensors)


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
