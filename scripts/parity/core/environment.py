"""What the workflow needs of the machine's environment, checked before any job runs, each
problem said in one line with what to do (docs/bad-input.md, "The environment"):

* a temporary folder (``TMPDIR``, else the system's) that exists, is writable and has room:
  Snakemake and the jobs write temporary files there, and a full one ended in a 70-line
  traceback from the scheduler that never named it;
* ``HOME``: cargo and rustup find the toolchain through it, and without it the build ends
  in rustup's "no default toolchain".
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Mapping

#: Room the temporary folder must have (bytes): a few job scripts and spec files.
MIN_TMP_BYTES = 64 << 20


def tmp_problem(env: Mapping[str, str] | None = None) -> str | None:
    """Why the temporary folder cannot serve the workflow, or None."""
    env = os.environ if env is None else env
    folder = env.get("TMPDIR") or tempfile.gettempdir()
    where = f"TMPDIR={folder}" if env.get("TMPDIR") else f"the temporary folder {folder}"
    if not os.path.isdir(folder):
        return f"{where} is not a folder: set TMPDIR to a writable folder with room"
    try:
        free = shutil.disk_usage(folder).free
    except OSError as e:
        return f"{where} cannot be read ({e.strerror}): set TMPDIR to a writable folder"
    if free < MIN_TMP_BYTES:
        return (
            f"{where} has {free >> 20} MiB free, less than {MIN_TMP_BYTES >> 20} MiB: free "
            "some space there or set TMPDIR to a folder with room"
        )
    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix="parity-check-") as f:
            f.write(b"x" * 4096)
            f.flush()
    except OSError as e:
        return f"{where} is not writable ({e.strerror}): set TMPDIR to a writable folder"
    return None


def home_problem(env: Mapping[str, str] | None = None) -> str | None:
    """Why cargo would not find its toolchain: ``HOME`` unset or not a folder, or None."""
    env = os.environ if env is None else env
    home = env.get("HOME")
    if not home:
        return (
            "HOME is not set: cargo and rustup find the Rust toolchain through it "
            "(export HOME=/path/to/your/home)"
        )
    if not os.path.isdir(home):
        return f"HOME={home} is not a folder: cargo and rustup find the toolchain through it"
    return None


def problems(builds: bool, env: Mapping[str, str] | None = None) -> list[str]:
    """Every environment problem of this run; ``builds``: whether it builds Rust runners."""
    out = [p for p in (tmp_problem(env),) if p]
    if builds:
        out += [p for p in (home_problem(env),) if p]
    return out
