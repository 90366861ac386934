"""The device axis: its names, PyTorch's name for each, and whether this host has one.

Pure Python and cheap to import: no torch (it runs while the DAG is built).
"""

from __future__ import annotations

import platform
import shutil
import subprocess

DEVICES = ("cpu", "cuda", "metal")
DTYPES = ("f32", "f64")

#: PyTorch's name for each device of the workflow's device axis.
TORCH_DEVICE = {"cpu": "cpu", "cuda": "cuda", "metal": "mps"}


def host_device_problem(device: str) -> str | None:
    """Why this host cannot run jobs on ``device``, or None.

    cuda needs an NVIDIA driver that lists a GPU (``nvidia-smi -L``); metal needs an
    Apple-silicon Mac.
    """
    if device == "cpu":
        return None
    if device == "cuda":
        smi = shutil.which("nvidia-smi")
        if smi is None:
            return "no NVIDIA driver on this host (nvidia-smi not found)"
        try:
            out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired) as e:
            return f"nvidia-smi failed ({e})"
        if out.returncode != 0 or "GPU" not in out.stdout:
            return f"nvidia-smi lists no GPU ({(out.stderr or out.stdout).strip()})"
        return None
    if device == "metal":
        if platform.system() == "Darwin" and platform.machine() == "arm64":
            return None
        host = f"{platform.system()} {platform.machine()}"
        return f"Metal needs an Apple-silicon Mac; this host is {host}"
    return f"unknown device {device!r}"
