"""A data file a user supplies (config ``data.file`` of an own model), checked in shape from
its safetensors header alone, before any job reads it (:func:`safetensors_header`): what
the plan accepts, the fixture job can read.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

#: The most header bytes a data file may declare (safetensors' own limit is 100 MB).
MAX_HEADER = 100_000_000


#: The byte size of each safetensors dtype (the format's own list).
SAFETENSORS_DTYPES = {
    "BOOL": 1,
    "U8": 1,
    "I8": 1,
    "F8_E5M2": 1,
    "F8_E4M3": 1,
    "I16": 2,
    "U16": 2,
    "F16": 2,
    "BF16": 2,
    "I32": 4,
    "U32": 4,
    "F32": 4,
    "I64": 8,
    "U64": 8,
    "F64": 8,
}


def safetensors_header(path: Path) -> dict:
    """The tensors a safetensors file declares (name → ``{"dtype", "shape"}``), read from its
    header alone and checked as safetensors' own loader checks it, so that the fixture job
    can read what the plan accepted: a JSON object, ``__metadata__`` a map of strings, each
    tensor a known dtype, a shape of non-negative integers and ``data_offsets`` that cover
    the bytes after the header in order, without gaps or overlaps, each as many as its
    dtype and shape need. Raises ``ValueError`` naming what is wrong (``OSError`` for a
    file that cannot be read)."""
    size = os.stat(path).st_size
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) != 8:
            raise ValueError("too short for a safetensors header")
        n = int.from_bytes(head, "little")
        if n > min(MAX_HEADER, size - 8):
            raise ValueError(f"declares a header of {n} bytes in a file of {size}")
        text = f.read(n)
    try:
        doc = json.loads(text)
    except (UnicodeDecodeError, ValueError) as e:
        raise ValueError(f"its header is not JSON ({e})") from None
    if not isinstance(doc, dict):
        raise ValueError(f"its header is a JSON {type(doc).__name__}, not an object")
    meta = doc.get("__metadata__", {})
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise ValueError("its __metadata__ is not a map of strings")
    out, spans = {}, []
    for name, info in doc.items():
        if name == "__metadata__":
            continue
        if not isinstance(info, dict):
            raise ValueError(f"tensor {name!r}: its header entry is not an object")
        dtype, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
        if dtype not in SAFETENSORS_DTYPES:
            raise ValueError(f"tensor {name!r}: dtype {dtype!r} is not a safetensors dtype")
        if not isinstance(shape, list) or not all(
            isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape
        ):
            raise ValueError(f"tensor {name!r}: shape {shape!r} is not a list of sizes")
        if not (
            isinstance(offsets, list)
            and len(offsets) == 2
            and all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)
        ):
            raise ValueError(f"tensor {name!r}: data_offsets {offsets!r} are not two integers")
        spans.append((offsets[0], offsets[1], name, math.prod(shape) * SAFETENSORS_DTYPES[dtype]))
        out[name] = {"dtype": dtype, "shape": shape}
    at = 0
    for start, end, name, need in sorted(spans):
        if start != at or end - start != need:
            raise ValueError(
                f"tensor {name!r}: bytes {start}..{end} where its dtype and shape need {need} "
                f"bytes from {at}"
            )
        at = end
    if at != size - 8 - n:
        raise ValueError(f"its tensors hold {at} bytes, the file {size - 8 - n} after the header")
    return out
