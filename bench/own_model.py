"""What bringing your own model costs (docs/own-model.md): the tiny Llama example's
composed candle port (examples/tiny_llama, experiment ``llama_port``) in a fresh working
folder, with the cargo target folder as it is (candle already built by the workflow or the
tests, as for any user after the first run).

Prints, on this machine:

- the first build of the port's runner (the user's crate, parity-common's runner library
  and the generated runner; candle's crates must not be compiled again: the build log is
  searched for ``Compiling candle-core``);
- the rebuild after an edit to the port's ``src/lib.rs`` (a comment appended to a copy of
  the crate);
- the experiment's four training runs (PyTorch and candle, float32 and float64, 100 steps),
  each run's training time per step from its trace (``runner.train_seconds``), candle ÷
  PyTorch, and the whole experiment's wall time.

    .venv/bin/python bench/own_model.py
"""

import re
import shutil
import time

import yaml
from common import REPO, fresh_workdir, machine, run_workflow, table

from parity.core import paths
from parity.plan.keys import RunKey
from parity.trace.reader import TraceReader

EXPERIMENT = "llama_port"


def timed(workdir, config, *targets) -> float:
    start = time.perf_counter()
    run_workflow(workdir, config, *targets, cores=2)
    return time.perf_counter() - start


def main():
    workdir = fresh_workdir("own-model")
    example = workdir / "examples" / "tiny_llama"
    shutil.copytree(
        REPO / "examples" / "tiny_llama", example, ignore=shutil.ignore_patterns("target")
    )
    for manifest in example.glob("*/Cargo.toml"):  # the copy's parity-common: this checkout's
        text = manifest.read_text(encoding="utf-8")
        ours = f'parity-common = {{ path = "{REPO / "rust" / "parity-common"}"'
        manifest.write_text(re.sub(r'parity-common = \{ path = "[^"]*"', ours, text))
    config = yaml.safe_load((example / "config.yaml").read_text(encoding="utf-8"))
    config["only"] = [EXPERIMENT]
    config["experiments"] = {EXPERIMENT: config["experiments"][EXPERIMENT]}
    binary = paths.OWN_BINARY.format(experiment=EXPERIMENT, framework="candle", device="cpu")
    log = workdir / paths.OWN_BUILD_LOG.format(
        experiment=EXPERIMENT, framework="candle", device="cpu"
    )

    first_build = timed(workdir, config, binary)
    recompiled_candle = "Compiling candle-core" in log.read_text(encoding="utf-8")
    port = example / "candle-port" / "src" / "lib.rs"
    port.write_text(port.read_text(encoding="utf-8") + "\n// an edit\n", encoding="utf-8")
    rebuild = timed(workdir, config, binary)
    experiment = timed(workdir, config)

    rows = []
    for dtype in ("f32", "f64"):
        ms = {}
        for run in ("torch", "candle"):
            meta = TraceReader(workdir / RunKey(EXPERIMENT, run, dtype, "cpu").trace).meta
            ms[run] = 1000 * meta["runner"]["train_seconds"] / meta["steps"]
        rows.append(
            {
                "dtype": dtype,
                "PyTorch (ms/step)": f"{ms['torch']:.2f}",
                "candle (ms/step)": f"{ms['candle']:.2f}",
                "candle ÷ PyTorch": f"{ms['candle'] / ms['torch']:.2f}",
            }
        )
    print(machine())
    print(
        f"first build of the port's runner: {first_build:.1f} s (candle recompiled: "
        f"{recompiled_candle})"
    )
    print(f"rebuild after an edit to the port: {rebuild:.1f} s")
    print(f"the experiment's runs, comparison and localisation: {experiment:.1f} s")
    print(table(rows, list(rows[0])))
    shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
