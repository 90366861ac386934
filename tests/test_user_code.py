"""The user's own Python code, watched (parity.core.usercode, docs/own-model.md "Errors you
may meet"): a model file that prints plans as if it printed nothing, its output shown and
never parsed; one that hangs at import, in its factory or in its forward pass is stopped
after ``limits.user_code_idle_seconds`` with one line naming the experiment, the factory,
the pid and where it hung, and progress lines while the workflow waits on it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from parity.core import usercode
from parity.core.config import ConfigError
from parity.plan.plan import Plan

from conftest import REPO, load_config

#: The seconds the tests give a model file (the config's limits.user_code_idle_seconds).
LIMIT = 2


def own_config(factory: str, limit: float | None = LIMIT) -> dict:
    """The default config with one own-model experiment ``mine`` (a model of 4 inputs, 2
    outputs), run alone, with ``limits.user_code_idle_seconds: limit``."""
    cfg = load_config()
    cfg["only"] = ["mine"]
    if limit is not None:
        cfg.setdefault("limits", {})["user_code_idle_seconds"] = limit
    cfg["experiments"]["mine"] = {
        "model": {"family": "own", "torch": {"factory": factory}},
        "loss": "mse",
        "data": {
            "seed": 3,
            "batches": 2,
            "batch_size": 3,
            "inputs": {"shape": [4]},
            "targets": {"shape": [2]},
        },
        "optimizer": {"name": "sgd", "lr": 0.1},
        "steps": 3,
        "runs": {"torch": {}, "torch_foreach": {"optimizer_path": "foreach"}},
        "comparisons": {"main": {"reference": "torch", "candidate": "torch_foreach"}},
    }
    return cfg


def model_file(folder: Path, body: str) -> tuple[Path, str]:
    """A model file ``folder/model.py`` with ``body``; (its path, its factory reference)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "model.py"
    path.write_text(body)
    return path, f"{path}:make"


def line_of(path: Path, text: str) -> int:
    """The line number of the first line of ``path`` holding ``text``."""
    return next(i for i, ln in enumerate(path.read_text().splitlines(), 1) if text in ln)


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


# ----- the model card, while the DAG is built ------------------------------------------


def test_a_model_file_that_prints_at_import_plans_normally_its_output_shown(tmp_path, capsys):
    _, ref = model_file(
        tmp_path / "m",
        "import os\nfrom torch import nn\n\n"
        'print(\'{"params": "not the card"}\')\n'
        'os.write(1, b"written to fd 1 by C code\\n")\n\n'
        "def make():\n"
        '    print("making the model")\n'
        "    return nn.Linear(4, 2)\n",
    )
    plan = Plan(own_config(ref), workdir=str(tmp_path))
    assert plan.experiments["mine"]["model"]["params"] == [["weight", [2, 4]], ["bias", [2]]]
    err = capsys.readouterr().err
    assert '[mine model card] {"params": "not the card"}' in err
    assert "[mine model card] written to fd 1 by C code" in err
    assert "[mine model card] making the model" in err


def test_a_model_file_that_hangs_at_import_is_stopped_naming_the_experiment_factory_and_pid(
    tmp_path, capsys, monkeypatch
):
    monkeypatch.setattr(usercode, "PROGRESS_SECONDS", 0.5)
    path, ref = model_file(
        tmp_path / "m",
        "import time\n\nprint('loading the weights', flush=True)\ntime.sleep(600)  # hangs\n",
    )
    with pytest.raises(ConfigError) as info:
        Plan(own_config(ref), workdir=str(tmp_path))
    message = str(info.value)
    assert "\n" not in message
    m = re.fullmatch(
        rf"config: experiments\.mine\.model\.torch: building the PyTorch model: the model "
        rf"factory {re.escape(str(path))} of experiment mine \(pid (\d+)\) made no progress "
        rf"for \d+ s, in the import of {re.escape(str(path))}: stopped at "
        rf"{re.escape(str(path))}:4 in <module> \(limits\.user_code_idle_seconds is 2; raise "
        r"it if the code needs longer\)",
        message,
    )
    assert m, message
    pid = int(m[1])
    assert gone(pid)
    err = capsys.readouterr().err
    assert "[mine model card] loading the weights" in err
    assert (
        f"waiting on the model factory {path} of experiment mine (pid {pid}), in the import "
        f"of {path}, for 0.5 s; limits.user_code_idle_seconds is 2"
    ) in err
    # the child's Python stack, relayed before it was killed
    assert f'[mine model card]   File "{path}", line 4 in <module>' in err


def test_a_factory_call_that_hangs_is_stopped_at_its_line(tmp_path):
    path, ref = model_file(
        tmp_path / "m",
        "def make():\n    while True:  # never returns\n        pass\n",
    )
    with pytest.raises(ConfigError) as info:
        Plan(own_config(ref), workdir=str(tmp_path))
    message = str(info.value)
    # the loop's line or its body's, as the signal finds it
    assert re.search(
        rf"in the call of {re.escape(ref)}: stopped at {re.escape(str(path))}:[23] "
        r"in make \(",
        message,
    ), message
    assert "limits.user_code_idle_seconds is 2" in message


def test_a_model_file_that_exits_at_import_is_refused_saying_so(tmp_path):
    _, ref = model_file(tmp_path / "m", "import sys\n\nprint('bye')\nsys.exit(0)\n")
    with pytest.raises(
        ConfigError,
        match=r"experiments\.mine\.model\.torch: the PyTorch model cannot be built: the "
        r"model's code called sys\.exit\(0\) while it was built$",
    ):
        Plan(own_config(ref), workdir=str(tmp_path))


def test_a_card_process_that_dies_without_a_card_names_its_status_and_last_output(tmp_path):
    _, ref = model_file(tmp_path / "m", "import os\n\nprint('bye', flush=True)\nos._exit(5)\n")
    with pytest.raises(
        ConfigError,
        match=r"the PyTorch model cannot be built: building its card \(the model factory "
        r".*model\.py of experiment mine\) ended with exit status 5 without a result; its last "
        r"output: bye$",
    ):
        Plan(own_config(ref), workdir=str(tmp_path))


@pytest.mark.workflow
def test_snakemake_dry_run_shows_a_hanging_model_files_output_and_stops_it(tmp_path):
    """``snakemake -n`` on a model file that prints, then hangs at import: its line shown,
    then one line naming it, where ``invalid config (nothing was run)`` says."""
    from conftest import run_workflow

    work = tmp_path / "w"
    work.mkdir()
    (work / "model.py").write_text(
        'import time\n\nprint(\'{"params": "printed"}\', flush=True)\ntime.sleep(600)\n'
    )
    proc = run_workflow(work, own_config("model.py:make"), "-n", "--cores", "1", check=False)
    assert proc.returncode != 0
    out = proc.stdout
    assert '[mine model card] {"params": "printed"}' in out
    assert "invalid config (nothing was run)" in out
    line = next(ln for ln in out.splitlines() if "made no progress" in ln)
    assert re.search(
        rf"config: experiments\.mine\.model\.torch: building the PyTorch model: the model "
        rf"factory {re.escape(str(work / 'model.py'))} of experiment mine \(pid \d+\) made no "
        rf"progress for \d+ s, in the import of .*: stopped at .*model\.py:4 in <module> ",
        line,
    ), out[-3000:]
    assert "Traceback" not in out
    assert not (work / "results" / "own" / "mine" / "card.json").exists()


# ----- in-process: the fixture, training and localisation jobs --------------------------


def test_the_watchdog_reports_waiting_then_stops_naming_the_step_and_line(tmp_path, monkeypatch):
    monkeypatch.setattr(usercode, "PROGRESS_SECONDS", 0.3)
    released, messages = threading.Event(), []

    def stuck(message: str) -> None:
        messages.append(message)
        released.set()

    log = tmp_path / "job.log"
    with open(log, "w", encoding="utf-8") as stream:
        what = "the model factory /x/model.py of experiment mine"
        with usercode.Watchdog(
            what, 1.5, folder=Path(__file__).parent, stream=stream, on_stuck=stuck
        ):
            usercode.progress("step 1 of 3")
            usercode.progress("step 2 of 3")
            released.wait(60)  # "hangs" here until the watchdog gives up
    here = line_of(Path(__file__), "released.wait(60)")
    assert len(messages) == 1
    assert re.fullmatch(
        rf"{re.escape(what)} \(pid {os.getpid()}\) made no progress for \d s, in step 2 of 3: "
        rf"stopped at {re.escape(__file__)}:{here} in "
        r"test_the_watchdog_reports_waiting_then_stops_naming_the_step_and_line, its Python "
        r"stack written to the log \(limits\.user_code_idle_seconds is 1\.5; raise it if the "
        r"code needs longer\)",
        messages[0],
    ), messages[0]
    text = log.read_text()
    assert (
        f"waiting on {what} (pid {os.getpid()}), in step 2 of 3, for 0.3 s; "
        "limits.user_code_idle_seconds is 1.5"
    ) in text
    assert f'File "{__file__}", line {here} in test_the_watchdog' in text  # faulthandler's
    assert text.rstrip().endswith(messages[0])
    assert not usercode._ACTIVE  # left on exit


def test_progress_without_a_watchdog_does_nothing():
    usercode.progress("step 1 of 3")
    assert not usercode._ACTIVE


#: Runs one job's entry point on a model whose forward hangs at its HANG_AT-th call, as the
#: workflow runs it: torch._dynamo preloaded as by the warm server.
JOB = """
import json, runpy, sys, types
sys.path.insert(0, "scripts")
import torch._dynamo  # noqa: F401
from parity.core import usercode
usercode.UNWIND_SECONDS = 2
d = json.load(open(sys.argv[1]))
ns = types.SimpleNamespace
if d["mode"] == "train":
    from parity.adapters import train_own_torch
    train_own_torch.main(ns(
        resources={"nice": 0}, log=[d["log"]], config=d["config"], threads=1,
        wildcards=ns(experiment="mine", run="torch", dtype="f64", device="cpu"),
        params=ns(settings=d["settings"]), input=ns(fixture=d["fixture"]),
        output=ns(trace=d["out"]),
    ))
elif d["mode"] == "fixture":
    sm = ns(resources={"nice": 0}, log=[d["log"]], config=d["config"], output=[d["out"]],
            wildcards=ns(experiment="mine"), params=ns(settings=d["settings"]))
    runpy.run_path("scripts/own_fixture.py", init_globals={"snakemake": sm})
else:
    from parity.core.fileio import job_start
    from parity.localise import replay
    from parity.plan.keys import RunKey
    from parity.trace import fixtures
    job_start(ns(resources={"nice": 0}, log=[d["log"]], config=d["config"]))
    fx = fixtures.load(d["fixture"])
    state = {n: fx[n] for n in ("lin.weight", "lin.bias")}
    replay.run_replay(RunKey("mine", "torch", "f64", "cpu"), d["settings"], d["fixture"],
                      state, "", 1, 1, None)
print("NOT STOPPED")
"""

HANGING_FORWARD = """import os
import time

from torch import nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 2)
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        hang_at = int(os.environ.get("HANG_AT") or 0)
        while hang_at and self.calls >= hang_at:
            try:
                time.sleep(600)  # hangs
            except BaseException:
                if not os.environ.get("SWALLOW"):  # else: swallows every exception
                    raise
        return self.lin(x)


def make():
    return Model()
"""


@pytest.fixture(scope="module")
def hanging_forward(tmp_path_factory):
    """A planned experiment ``mine`` whose model's forward hangs at its ``HANG_AT``-th call
    (the environment variable; never without it), and its fixture."""
    from parity.own import fixture as own_fixture

    tmp = tmp_path_factory.mktemp("hang")
    path, ref = model_file(tmp / "m", HANGING_FORWARD)
    cfg = own_config(ref)
    plan = Plan(cfg, workdir=str(tmp))
    fixture = tmp / "fixture.safetensors"
    own_fixture.write(str(fixture), plan.fixture_settings("mine"))
    return tmp, path, cfg, plan, fixture


@pytest.mark.parametrize(
    ("mode", "hang_at", "doing", "swallow"),
    [
        ("fixture", 1, "the forward pass on a batch of shape [3, 4]", False),
        ("train", 2, "step 2 of 3", False),
        ("replay", 1, "the replay of step 1", False),
        # the exception that unwinds it caught: the process exits without it
        ("train", 2, "step 2 of 3", True),
    ],
)
def test_a_forward_pass_that_hangs_in_a_job_is_stopped_with_its_stack_in_the_log(
    hanging_forward, mode, hang_at, doing, swallow
):
    tmp, path, cfg, plan, fixture = hanging_forward
    name = f"{mode}-swallow" if swallow else mode
    log, out = tmp / f"{name}.log", tmp / f"{name}.out"
    settings = (
        plan.fixture_settings("mine") if mode == "fixture" else plan.run_settings("mine", "torch")
    )
    args = tmp / f"{name}.json"
    args.write_text(
        json.dumps(
            {
                "mode": mode,
                "log": str(log),
                "config": cfg,
                "settings": settings,
                "fixture": str(fixture),
                "out": str(out),
            }
        )
    )
    env = {**os.environ, "HANG_AT": str(hang_at), "SWALLOW": "1" if swallow else ""}
    proc = subprocess.run(
        [sys.executable, "-c", JOB, str(args)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == usercode.EXIT_STUCK, proc.stderr[-3000:]
    assert "NOT STOPPED" not in proc.stdout
    where = f"{path}:{line_of(path, 'time.sleep(600)')}"
    pattern = (
        rf"the model factory {re.escape(str(path))} of experiment mine \(pid \d+\) made no "
        rf"progress for \d+ s, in {re.escape(doing)}: stopped at {re.escape(where)} in "
        r"forward, its Python stack written to the log \(limits\.user_code_idle_seconds is 2;"
    )
    assert re.search(pattern, proc.stderr), proc.stderr[-3000:]
    text = log.read_text()
    assert re.search(pattern, text.strip().splitlines()[-1]), text[-3000:]
    assert f'File "{path}", line {line_of(path, "time.sleep(600)")} in forward' in text
    assert not out.exists()  # nothing written
    if not swallow:  # unwound: its temporary files gone too
        assert not [p.name for p in tmp.iterdir() if out.name in p.name]
