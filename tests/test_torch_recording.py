"""The PyTorch runner's recording: a recorded step copied beside the next forward pass
(``copy_beside``) writes the same trace, byte for byte in every value, as the copy made in
the loop."""

import logging
import threading
import time

import numpy as np
import pytest

from parity.plan.keys import RunKey
from parity.plan.plan import Plan
from parity.trace import fixtures
from parity.trace.reader import TraceReader
from parity.train import torch as torch_runner

from conftest import load_config

LOG = logging.getLogger("test_torch_recording")


def float32_run(tmp_path, experiment: str, steps: int, **record) -> tuple[RunKey, dict, str]:
    """(key, settings, fixture path) of ``experiment``'s PyTorch run on the CPU in float32,
    ``steps`` steps, ``record`` merged into its record settings, its fixture written to
    ``tmp_path``."""
    plan = Plan(load_config())
    settings = plan.run_settings(experiment, "torch")
    settings["steps"] = steps
    settings["record"] = {**settings["record"], **record}
    fixture = tmp_path / "fx.safetensors"
    fixtures.write(fixture, plan.fixture_settings(experiment))
    return RunKey(experiment, "torch", "f32", "cpu"), settings, fixture


@pytest.mark.parametrize(
    ("experiment", "every"), [("a3_adamw", 1), ("cnn_adam", 1), ("transformer_adamw", 3)]
)
def test_copying_beside_the_next_step_records_the_same_values(
    tmp_path, monkeypatch, experiment, every
):
    """Parameters, gradients and both AdamW moments, recorded every step (every third for
    the transformer, the last step too): each value is bit-identical with and without the
    helper thread, as is the loss of every recorded step. The helper's copies are slowed
    down, so a loop that did not wait for them before changing the tensors would be caught
    rather than win the race by chance."""
    host = torch_runner._host

    def slow_host(t):
        if threading.current_thread() is not threading.main_thread():
            time.sleep(0.002)
        return host(t)

    monkeypatch.setattr(torch_runner, "_host", slow_host)
    key, settings, fixture = float32_run(
        tmp_path, experiment, 10, every=every, grads=True, moments=True
    )
    traces = {}
    for beside in (False, True):
        out = tmp_path / f"beside-{beside}.parquet"
        torch_runner.train(key, settings, fixture, str(out), 1, LOG, copy_beside=beside)
        reader = TraceReader(out)
        traces[beside] = list(reader.iter_steps(reader.layout.columns))
    inline, beside = traces[False], traces[True]
    assert [r.step for r in beside] == [r.step for r in inline]
    assert [r.step for r in inline][-1] == 10 and len(inline) == (10 // every) + 1 + (
        10 % every > 0
    )
    for a, b in zip(inline, beside, strict=True):
        assert (a.loss is None and b.loss is None) or (
            np.float64(a.loss).tobytes() == np.float64(b.loss).tobytes()
        )
        assert a.tensors.keys() == b.tensors.keys()
        for name, value in a.tensors.items():
            assert value.tobytes() == b.tensors[name].tobytes(), (a.step, name)
    kinds = {n.split(":")[0] for n in inline[-1].tensors if ":" in n}
    assert kinds == {"grad", "exp_avg", "exp_avg_sq"}


def test_the_copy_is_made_beside_only_for_a_built_in_model_on_the_cpu(tmp_path, monkeypatch):
    """The default: a helper thread copies for the built-in model on the CPU; an own
    model's forward pass may change a recorded tensor in place, so it is copied in the
    loop (no helper thread made)."""
    made = []
    real = torch_runner.ThreadPoolExecutor

    def spy(*args, **kwargs):
        made.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(torch_runner, "ThreadPoolExecutor", spy)
    key, settings, fixture = float32_run(tmp_path, "a3_adamw", 3)
    torch_runner.train(key, settings, fixture, str(tmp_path / "a.parquet"), 1, LOG)
    assert len(made) == 1

    class OwnLike(torch_runner.Net):
        pass

    torch_runner.train(key, settings, fixture, str(tmp_path / "b.parquet"), 1, LOG, net=OwnLike)
    assert len(made) == 1
    a = list(TraceReader(tmp_path / "a.parquet").iter_steps())
    b = list(TraceReader(tmp_path / "b.parquet").iter_steps())
    assert [r.tensors["fc1.weight"].tobytes() for r in a] == [
        r.tensors["fc1.weight"].tobytes() for r in b
    ]


def test_a_writer_swapped_in_is_handed_every_recorded_step(tmp_path):
    """``train(writer=...)`` (what bench/recording_floor.py measures with): the writer swapped
    in is handed every recorded step, with the values and losses ``TraceWriter`` writes."""
    key, settings, fixture = float32_run(tmp_path, "a3_adamw", 5)
    handed = []

    class Capture:
        def __init__(self, path, layout, meta):
            self.meta = {**meta, "runner": dict(meta["runner"]), "status": "complete"}

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            pass

        def write_step(self, step, loss, tensors, handed_over=False, scalars=None):
            handed.append((step, loss, {n: np.array(v, copy=True) for n, v in tensors.items()}))

    out = tmp_path / "a.parquet"
    torch_runner.train(key, settings, fixture, str(out), 1, LOG)
    torch_runner.train(key, settings, fixture, str(tmp_path / "b"), 1, LOG, writer=Capture)
    assert not (tmp_path / "b").exists()
    written = list(TraceReader(out).iter_steps())
    assert [s for s, _, _ in handed] == [r.step for r in written] == list(range(6))
    for (step, loss, tensors), r in zip(handed, written, strict=True):
        assert loss == r.loss
        assert {n: v.tobytes() for n, v in tensors.items()} == {
            n: v.tobytes() for n, v in r.tensors.items()
        }, step


@pytest.mark.parametrize("kind", ["RawWrite", "DirectWrite"])
def test_the_floor_benchmarks_raw_writers_write_every_byte_they_are_handed(tmp_path, kind):
    """bench/recording_floor.py's ``raw`` and ``direct`` variants write each step's bytes,
    in order, whole: steps of odd sizes that cross the O_DIRECT buffer (16 MiB) and end
    mid-block."""
    import importlib
    import sys

    from conftest import REPO

    sys.path.insert(0, str(REPO / "bench"))
    try:
        floor = importlib.import_module("recording_floor")
    finally:
        sys.path.remove(str(REPO / "bench"))
    rng = np.random.default_rng(7)
    steps = [
        [rng.standard_normal(n).astype(np.float32) for n in (1_000_003, 7)],
        [rng.standard_normal(n).astype(np.float32) for n in (3_333_331, 5)],
        [rng.standard_normal(n).astype(np.float32) for n in (2_500_001, 1)],
    ]
    path = tmp_path / "raw.bin"
    cls = getattr(floor, kind)
    try:
        writer = cls(path, None, {"runner": {}})
    except OSError as e:  # O_DIRECT unsupported where tmp_path lives
        pytest.skip(f"{kind}: {e}")
    for arrays in steps:
        writer.work(arrays)
    writer.close_file()
    assert path.read_bytes() == b"".join(a.tobytes() for arrays in steps for a in arrays)
    writer._pool.shutdown()
