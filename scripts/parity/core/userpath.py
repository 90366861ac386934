"""Paths a config names (an own model's factory file and crates, its data file, the probe
folders), checked when the plan is made, before any job runs.

:func:`check` asks the file system itself (``os.stat``, then an open), so whatever it does
with the path (symbolic links, ``..`` after a link, permissions) is what is checked, and
every way a path can fail is one :class:`~parity.core.config.ConfigError` naming the key:
missing, a broken symbolic link (and where it points), a loop of symbolic links, a part of
the path that is a file, the other kind (a folder for a file), not a regular file (a FIFO
would block the reader), unreadable. ``Path.resolve`` raises a bare ``RuntimeError`` on a
symbolic-link loop (Python < 3.13); nothing here calls it on a path that was not checked.

Pure Python: importing this must stay cheap.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from parity.core.config import ConfigError

#: The kinds :func:`check` tells apart.
KINDS = ("file", "folder")


def _shown(given: str | os.PathLike, full: str) -> str:
    """The path as the config gives it, and where it leads when relative."""
    given = os.fspath(given)
    return given if os.path.isabs(given) else f"{given} ({full})"


def _broken(full: str, e: OSError) -> str:
    """Why ``os.stat(full)`` failed with ``e``, in words."""
    if e.errno == errno.ELOOP:
        return "a loop of symbolic links (the file system cannot follow it)"
    if e.errno == errno.ENOENT:
        if os.path.islink(full):
            try:
                to = os.readlink(full)
            except OSError:
                to = "?"
            return f"a broken symbolic link (to {to}, which does not exist)"
        return "does not exist"
    if e.errno == errno.ENOTDIR:
        return "does not exist (a part of the path is a file, not a folder)"
    if e.errno in (errno.EACCES, errno.EPERM):
        return "cannot be reached (permission denied)"
    return f"cannot be reached ({e.strerror or e})"


def problem(
    path: str | os.PathLike, kind: str = "file", base: str | os.PathLike | None = None
) -> tuple[str, str | None]:
    """``(full, why)``: the absolute path of ``path`` (relative to ``base``, default the
    current folder; symbolic links followed, as ``os.path.realpath`` does once the path is
    known to resolve) and why it is not a readable ``kind`` (``"file"``, a regular file, or
    ``"folder"``), None when it is; ``why`` starts with the path as given (and where it
    leads, when relative). Never raises for a path that does not resolve, and never opens
    what is not a regular file or a folder (a FIFO would block)."""
    full, why = reason(path, kind, base)
    if why is None:
        return full, None
    return full, f"{_shown(path, full)}: {why}"


def reason(
    path: str | os.PathLike, kind: str = "file", base: str | os.PathLike | None = None
) -> tuple[str, str | None]:
    """:func:`problem` with ``why`` alone (``does not exist``), for a message that names
    the path itself."""
    if kind not in KINDS:
        raise ValueError(f"kind {kind!r} is not one of {KINDS}")
    full = os.path.join(os.fspath(base) if base is not None else os.getcwd(), os.fspath(path))
    try:
        st = os.stat(full)
    except (OSError, ValueError) as e:  # ValueError: a NUL in the path
        why = _broken(full, e) if isinstance(e, OSError) else f"not a path ({e})"
        if os.fspath(path).startswith("~"):
            why += f"; a leading ~ is not expanded here: write {os.path.expanduser(path)}"
        return full, why
    if kind == "file" and not stat.S_ISREG(st.st_mode):
        what = (
            "a folder"
            if stat.S_ISDIR(st.st_mode)
            else "not a regular file (a device, a FIFO or a socket)"
        )
        return full, f"is {what}, not a file"
    if kind == "folder" and not stat.S_ISDIR(st.st_mode):
        return full, "is a file, not a folder"
    try:
        if kind == "file":
            with open(full, "rb"):
                pass
        else:
            with os.scandir(full):
                pass
    except OSError as e:
        return full, f"cannot be read ({e.strerror or e})"
    return os.path.realpath(full), None


def check(
    key: str, path: str | os.PathLike, kind: str = "file", base: str | os.PathLike | None = None
) -> Path:
    """The absolute, resolved path of ``path`` (:func:`problem`), a readable ``kind``.
    Raises :class:`ConfigError` at ``key`` naming the path and what is wrong."""
    full, why = problem(path, kind, base)
    if why is not None:
        raise ConfigError(key, why)
    return Path(full)
