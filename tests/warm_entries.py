"""Entry functions and a stand-in ``snakemake`` object for tests/test_warm.py: a warm
server's child imports an entry by its module's name, so they live in a module of their own
(tests/ is on the child's sys.path, as on the test's)."""

import json
import os
import sys
import time


class Job:
    """The parts of Snakemake's ``snakemake`` object that parity.core.warm reads."""

    def __init__(self, out, log=None, warm_start=True):
        self.output = [str(out)]
        self.log = [str(log)] if log else []
        self.config = {"warm_start": warm_start}


def _started_with(name):
    with open("/proc/self/environ", "rb") as f:
        pairs = [p.split(b"=", 1) for p in f.read().split(b"\0") if b"=" in p]
    return next((v.decode() for k, v in pairs if k.decode() == name), None)


def report(sm):
    """Write what the process running the job sees, and say so on stdout and stderr."""
    mask = os.umask(0)
    os.umask(mask)
    seen = {
        "pid": os.getpid(),
        "ppid": os.getppid(),
        "cwd": os.getcwd(),
        "umask": mask,
        "marker": os.environ.get("WARM_TEST_MARKER"),
        "argv": sys.argv,
        "path": sys.path,
        # the environment the process was started with (a fork keeps its parent's)
        "started_with": _started_with("GLIBC_TUNABLES"),
    }
    with open(sm.output[0], "w", encoding="utf-8") as f:
        json.dump(seen, f)
    print("job says hello on stdout", flush=True)
    print("job says hello on stderr", file=sys.stderr, flush=True)


def fail(sm):
    raise ValueError("the job's own error")


def exit_3(sm):
    sys.exit(3)


def sleep(sm):
    """Write this process's pid, then sleep until killed."""
    with open(sm.output[0], "w", encoding="utf-8") as f:
        f.write(str(os.getpid()))
    time.sleep(120)
