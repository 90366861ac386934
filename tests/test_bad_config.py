"""Bad configs are refused before any job runs, with the offending key path.

Each case runs the real ``snakemake -n`` on the default config with one mutation, and
checks the message and that nothing was created. README "Bad input" lists these cases.
"""

import copy
import json
import math
import os

import pytest

from conftest import REPO, load_config, run_workflow

pytestmark = pytest.mark.workflow


def exp(c, name="a3_sgd"):
    return c["experiments"][name]


def unshare(c):
    """YAML anchors share dicts between experiments; give each its own copy."""
    c["experiments"] = copy.deepcopy(c["experiments"])
    for e in c["experiments"].values():
        for k in list(e):
            e[k] = copy.deepcopy(e[k])
    return c


#: (what is wrong, mutation, text the user sees)
CASES = [
    (
        "misspelt top-level key",
        lambda c: c.update(tolerence=1e-6),
        "(top level): Additional properties are not allowed ('tolerence' was unexpected)",
    ),
    (
        "misspelt experiment key",
        lambda c: exp(c).update(stesp=3),
        "experiments.a3_sgd: Additional properties are not allowed ('stesp' was unexpected)",
    ),
    (
        "unknown device",
        lambda c: c.update(devices=["gpu"]),
        "devices[0]: 'gpu' is not one of ['cpu', 'cuda', 'metal']",
    ),
    (
        "unknown dtype",
        lambda c: c.update(dtypes=["f32", "f16"]),
        "dtypes[1]: 'f16' is not one of ['f32', 'f64']",
    ),
    ("empty device list", lambda c: c.update(devices=[]), "devices: [] should be non-empty"),
    (
        "unknown framework in a run name",
        lambda c: exp(c).update(runs={"torch": {}, "jax": {}}),
        "experiments.a3_sgd.runs: 'jax' does not match any of the regexes",
    ),
    (
        "unknown experiment in the framework table",
        lambda c: c.update(framework_summary=[{"experiment": "a9", "label": "x"}]),
        "framework_summary[0].experiment: 'a9' is not an experiment of this config",
    ),
    (
        "unknown experiment for determinism",
        lambda c: c.update(determinism={"experiments": ["a9"]}),
        "determinism.experiments[0]: 'a9' is not an experiment of this config",
    ),
    (
        "negative learning rate",
        lambda c: exp(c)["optimizer"].update(lr=-0.1),
        "experiments.a3_sgd.optimizer.lr: -0.1 is less than or equal to the minimum of 0",
    ),
    (
        "learning rate of the wrong type",
        lambda c: exp(c)["optimizer"].update(lr="fast"),
        "experiments.a3_sgd.optimizer.lr: 'fast' is not of type 'number'",
    ),
    (
        "beta2 of 1",
        lambda c: exp(c, "a1_adam")["optimizer"].update(betas=[0.9, 1.0]),
        "experiments.a1_adam.optimizer.betas[1]: 1.0 is greater than or equal to the maximum of 1",
    ),
    (
        "negative beta1",
        lambda c: exp(c, "a1_adam")["optimizer"].update(betas=[-0.1, 0.999]),
        "experiments.a1_adam.optimizer.betas[0]: -0.1 is less than the minimum of 0",
    ),
    (
        "eps of 0",
        lambda c: exp(c, "a1_adam")["optimizer"].update(eps=0),
        "experiments.a1_adam.optimizer.eps: 0 is less than or equal to the minimum of 0",
    ),
    (
        "negative weight decay",
        lambda c: exp(c, "a1_adam")["optimizer"].update(weight_decay=-1),
        "experiments.a1_adam.optimizer.weight_decay: -1 is less than the minimum of 0",
    ),
    (
        "zero steps",
        lambda c: exp(c).update(steps=0),
        "experiments.a3_sgd.steps: 0 is less than the minimum of 1",
    ),
    (
        "zero batch size",
        lambda c: exp(c)["data"].update(batch_size=0),
        "experiments.a3_sgd.data.batch_size: 0 is less than the minimum of 1",
    ),
    (
        "MLP layer of width 0",
        lambda c: exp(c)["model"].update(sizes=[8, 0, 4]),
        "experiments.a3_sgd.model.sizes[1]: 0 is less than the minimum of 1",
    ),
    (
        "experiment name that would reach a path",
        lambda c: c["experiments"].update({"../evil": copy.deepcopy(exp(c))}),
        "experiments: '../evil' does not match '^[a-z][a-z0-9_]*$'",
    ),
    (
        "comparison name with a slash",
        lambda c: exp(c).update(comparisons={"a/b": {"reference": "torch", "candidate": "candle"}}),
        "experiments.a3_sgd.comparisons: 'a/b' does not match '^[a-z][a-z0-9_]*$'",
    ),
    (
        "comparison naming a run that is not configured",
        lambda c: exp(c).update(
            comparisons={"main": {"reference": "torch", "candidate": "candel"}}
        ),
        "experiments.a3_sgd.comparisons.main.candidate: 'candel' is not a run of this experiment",
    ),
    ("threads 0", lambda c: c.update(threads=0), "threads: 0 is less than the minimum of 1"),
    (
        "negative tolerance",
        lambda c: c.update(tolerance=-1e-6),
        "tolerance: -1e-06 is less than or equal to the minimum of 0",
    ),
    (
        "candle-nn's AdamW asked to be an Adam",
        # The config is merged over the defaults, whose candle run asks for adamw: the
        # run's own override says adam, from candle-nn, which has none.
        lambda c: exp(c, "a1_adam")["runs"].update(
            candle={"optimizer": {"name": "adam", "implementation": "candle"}}
        ),
        "experiments.a1_adam.runs.candle.optimizer.implementation: candle-nn 0.11.0 has no Adam",
    ),
    (
        "amsgrad from candle-nn's AdamW",
        lambda c: exp(c, "a3_adamw")["runs"].update(
            candle={"optimizer": {"amsgrad": True, "implementation": "candle"}}
        ),
        "experiments.a3_adamw.runs.candle.optimizer.amsgrad: candle-nn's AdamW has no amsgrad",
    ),
    (
        "float32 factors with candle-nn's own AdamW",
        lambda c: exp(c, "a3_adamw")["runs"].update(
            candle={"optimizer": {"bias_correction": "f32"}}
        ),
        "bias_correction: float32 bias-correction factors need implementation: manual",
    ),
    (
        "recording moments candle-nn keeps private",
        lambda c: exp(c, "a3_adamw").update(record={"moments": True}),
        "experiments.a3_adamw.runs.candle.record.moments: candle-nn keeps AdamW's moments private",
    ),
    (
        "recording a tensor the model lacks",
        lambda c: exp(c).update(record={"tensors": ["fc3.weight"]}),
        "experiments.a3_sgd.runs.torch.record.tensors: 'fc3.weight' is not a parameter",
    ),
    (
        "CNN kernel longer than its input",
        lambda c: exp(c, "cnn_adam")["model"].update(kernel=17),
        "experiments.cnn_adam.model.kernel: kernel 17 is longer than the input length 16",
    ),
    (
        "CNN layers that do not chain",
        lambda c: exp(c, "cnn_adam")["model"].update(fc_in=50),
        "experiments.cnn_adam.model.fc_in: fc takes 50 inputs but the convolution gives",
    ),
    (
        "cross-entropy with one class",
        lambda c: exp(c, "a1_adam")["model"].update(sizes=[6, 16, 1]),
        "experiments.a1_adam.model: cross-entropy needs at least two outputs",
    ),
    (
        "unknown loss",
        lambda c: exp(c).update(loss="hinge"),
        "experiments.a3_sgd.loss: 'hinge' is not one of ['mse', 'cross_entropy']",
    ),
    (
        "PyTorch code path that does not exist",
        lambda c: exp(c, "a3_adamw")["runs"].update(torch={"optimizer_path": "turbo"}),
        "experiments.a3_adamw.runs.torch.optimizer_path: 'turbo' is not one of",
    ),
    # Non-finite numbers (YAML's .nan and .inf) pass a JSON schema; they are refused first.
    (
        "tolerance .nan",
        lambda c: c.update(tolerance=math.nan),
        "tolerance: .nan is not a finite number; every number must be",
    ),
    (
        "learning rate .inf",
        lambda c: exp(c)["optimizer"].update(lr=math.inf),
        "experiments.a3_sgd.optimizer.lr: .inf is not a finite number",
    ),
    (
        "a run's learning rate .nan",
        lambda c: exp(c)["runs"].update(candle={"optimizer": {"lr": math.nan}}),
        "experiments.a3_sgd.runs.candle.optimizer.lr: .nan is not a finite number",
    ),
    (
        "comparison tolerance -.inf",
        lambda c: exp(c)["comparisons"]["main"].update(tolerance=-math.inf),
        "experiments.a3_sgd.comparisons.main.tolerance: -.inf is not a finite number",
    ),
    (
        "diagnosis atol .nan",
        lambda c: c["diagnosis"]["fp64_rule"].update(atol=math.nan),
        "diagnosis.fp64_rule.atol: .nan is not a finite number",
    ),
    # YAML 1.1 reads 1e-6 (no dot, no exponent sign) as text.
    (
        "tolerance written 1e-6",
        lambda c: c.update(tolerance="1e-6"),
        (
            "tolerance: '1e-6' is not of type 'number': YAML 1.1, which PyYAML and Snakemake "
            "read, takes '1e-6' as text: a number in exponent form needs a dot in the mantissa "
            "and a sign in the exponent; write 1.0e-6"
        ),
    ),
    (
        "steps written 1e3",
        lambda c: exp(c).update(steps="1e3"),
        "experiments.a3_sgd.steps: '1e3' is not of type 'integer': YAML 1.1",
    ),
    # Sizes are estimated before the DAG is built and refused beyond config `limits`.
    (
        "a billion steps",
        lambda c: exp(c).update(steps=1_000_000_000),
        "experiments.a3_sgd.steps: steps: 1000000000, more than limits.max_steps (1000000)",
    ),
    (
        "an MLP layer of 10^10 weights",
        lambda c: exp(c)["model"].update(sizes=[100000, 100000, 4]),
        (
            "experiments.a3_sgd.model: parameter fc1.weight has 10000000000, more than "
            "limits.max_tensor_elements (100000000)"
        ),
    ),
    (
        "a fixture of 10^10 inputs",
        lambda c: exp(c)["data"].update(batches=100000, batch_size=12500),
        (
            "experiments.a3_sgd.data: the fixture's inputs x have 10000000000, more than "
            "limits.max_tensor_elements"
        ),
    ),
    (
        "a trace beyond the trace limit",
        lambda c: c["limits"].update(max_trace_bytes=100000),
        (
            "experiments.a3_sgd.runs.torch: its trace (101 recorded steps) would hold 171 kB, "
            "more than limits.max_trace_bytes (100 kB)"
        ),
    ),
    (
        "a run beyond the work limit",
        lambda c: exp(c).update(steps=900000) or exp(c)["data"].update(batch_size=100000),
        (
            "experiments.a3_sgd.runs.torch: a run takes about 5.18e+13 multiply-adds, more than "
            "limits.max_run_macs (1e+13 multiply-adds)"
        ),
    ),
    (
        "a sensitivity search of 10^9 runs",
        lambda c: c["faults"]["sensitivity"].update(log10_range=[-1000000000, -2]),
        (
            "faults.sensitivity.log10_range: the search would make 1000000006 runs, more than "
            "limits.max_sensitivity_runs (64 runs)"
        ),
    ),
    (
        "recording every 2^33rd step (the runners count in 32 bits)",
        lambda c: exp(c).update(record={"every": 2**33}),
        "experiments.a3_sgd.record.every: 8589934592 is greater than the maximum of 4294967295",
    ),
    (
        "misspelt limit",
        lambda c: c["limits"].update(max_stesp=3),
        "limits: Additional properties are not allowed ('max_stesp' was unexpected)",
    ),
    (
        "threads beyond 4096",
        lambda c: c.update(threads=10**9),
        "threads: 1000000000 is greater than the maximum of 4096",
    ),
    # Every list that names things names each once (tests/test_schema_walk.py).
    (
        "a tensor named twice in record.tensors",
        lambda c: exp(c).update(record={"tensors": ["fc1.weight", "fc2.bias", "fc1.weight"]}),
        (
            "experiments.a3_sgd.record.tensors: 'fc1.weight' is given twice (items [0] and "
            "[2]); each may be given once"
        ),
    ),
    (
        "a parameter group naming a pattern twice",
        lambda c: exp(c).update(param_groups=[{"params": ["*.bias", "*.bias"], "lr": 0.1}, {}]),
        "experiments.a3_sgd.param_groups[0].params: '*.bias' is given twice (items [0] and [1])",
    ),
    (
        "a framework-table row given twice",
        lambda c: c.update(framework_summary=[{"experiment": "a1_adam", "label": "A1"}] * 2),
        "framework_summary: {'experiment': 'a1_adam', 'label': 'A1'} is given twice",
    ),
    (
        "one experiment in two framework-table rows",
        lambda c: c.update(
            framework_summary=[
                {"experiment": "a1_adam", "label": "A1"},
                {"experiment": "a1_adam", "label": "A1 again"},
            ]
        ),
        (
            "framework_summary[1].experiment: 'a1_adam' is already the experiment of "
            "framework_summary[0]; each row names its own experiment and label"
        ),
    ),
    # Free text that reaches a page is one line without control characters.
    (
        "a framework-table label with a line break and a heading",
        lambda c: c.update(
            framework_summary=[{"experiment": "a1_adam", "label": "A1\n# injected"}]
        ),
        "framework_summary[0].label: 'A1\\n# injected' does not match '^[^\\\\x00-",
    ),
    (
        "a fault's description with a terminal escape",
        lambda c: c["faults"]["instances"]["weight_decay"].update(description="red \x1b[31m"),
        "(it holds the control character U+001B)",
    ),
    (
        "a fault's note with a line separator",
        lambda c: c["faults"]["instances"]["weight_decay"].update(note="a\u2028b"),
        "faults.instances.weight_decay.note: 'a\\u2028b' does not match",
    ),
    (
        "a fault's note with a bidirectional override",
        lambda c: c["faults"]["instances"]["weight_decay"].update(note="SGD \u202eevil"),
        "(it holds the control character U+202E)",
    ),
    (
        "a framework-table label written as a literal block (its line break kept)",
        lambda c: c.update(framework_summary=[{"experiment": "a1_adam", "label": "A1,\nA2\n"}]),
        "as a folded block scalar, `>`, which joins its lines)",
    ),
    (
        "a tensor name with a tab in a parameter group",
        lambda c: exp(c).update(param_groups=[{"params": ["fc1.\tweight"], "lr": 0.1}, {}]),
        "experiments.a3_sgd.param_groups[0].params[0]: 'fc1.\\tweight' does not match",
    ),
    # Paths the config names resolve, whatever the file system does.
    (
        "a probe folder that does not exist",
        lambda c: c.update(probes={"folder": "no/such/probes"}),
        "probes.folder: no/such/probes (",
    ),
    (
        "a known-bugs folder that does not exist",
        lambda c: c.update(fuzz={"known_bugs": "no/such/folder"}),
        "fuzz.known_bugs: no/such/folder (",
    ),
]


@pytest.mark.parametrize(("what", "mutate", "message"), CASES, ids=[c[0] for c in CASES])
def test_bad_config_is_refused_before_any_job(tmp_path, what, mutate, message):
    config = unshare(load_config())
    mutate(config)
    proc = run_workflow(tmp_path, config, "-n", "--cores", "1", check=False)
    assert proc.returncode != 0, what
    assert "invalid config (nothing was run)" in proc.stdout
    assert message in proc.stdout, proc.stdout[-3000:]
    assert not (tmp_path / "results").exists()


def test_a_note_written_as_a_folded_block_is_one_line_of_text(tmp_path):
    """``note: >`` joins its lines and keeps a final line break, which is not part of the
    text: the plan takes it (without the line break); the fold walks the schema, so a
    final line break of a value that is not free text (a path) is left for the schema."""
    from parity.core.configcheck import fold_text

    text = "framework_summary:\n  - experiment: a1_adam\n    label: >\n      Adam,\n      three\n"
    cfg = tmp_path / "folded.yaml"
    cfg.write_text(text)
    proc = run_workflow(tmp_path, None, "-n", "--cores", "1", "--configfile", str(cfg), check=False)
    assert proc.returncode == 0, proc.stdout[-3000:]
    schema = json.loads((REPO / "schemas/config.schema.json").read_text())
    config = {
        "framework_summary": [{"experiment": "a1_adam", "label": "Adam, three layers\n"}],
        "faults": {"instances": {"wd": {"note": "a\nb\n", "description": "d\n"}}},
        "probes": {"folder": "probes\n"},
    }
    assert fold_text(config, schema) == [
        "framework_summary[0].label",
        "faults.instances.wd.description",
    ]
    assert config["framework_summary"][0]["label"] == "Adam, three layers"
    assert config["faults"]["instances"]["wd"] == {"note": "a\nb\n", "description": "d"}
    assert config["probes"]["folder"] == "probes\n"


def test_there_are_at_least_25_cases():
    assert len(CASES) >= 25


def test_a_key_given_twice_in_a_config_file_is_refused(tmp_path):
    """YAML keeps the last of two equal keys silently; every config file is read again
    strictly."""
    text = (REPO / "config.yaml").read_text() + "\ntolerance: 0.5\n"
    cfg = tmp_path / "dup.yaml"
    cfg.write_text(text)
    proc = run_workflow(tmp_path, None, "-n", "--cores", "1", "--configfile", str(cfg), check=False)
    assert proc.returncode != 0
    assert "invalid config (nothing was run)" in proc.stdout
    first = next(i for i, line in enumerate(text.splitlines(), 1) if line.startswith("tolerance"))
    last = len(text.splitlines())
    assert (
        f"dup.yaml: line {last}: duplicate key 'tolerance' (first given at line {first})"
        in proc.stdout
    ), proc.stdout[-3000:]
    assert not (tmp_path / "results").exists()


def test_a_config_file_over_the_size_limit_is_refused(tmp_path):
    config = unshare(load_config())
    config["limits"]["max_yaml_bytes"] = 1000
    proc = run_workflow(tmp_path, config, "-n", "--cores", "1", check=False)
    assert proc.returncode != 0
    assert "bytes, more than limits.max_yaml_bytes (1000); nothing was parsed" in proc.stdout


#: Probe files refused while the DAG is built: (what, probe document edit, message).
PROBE_CASES = [
    (
        "ones of 10^10 elements",
        "inputs:\n  a: {ones: [100000, 100000]}\n",
        (
            "inputs.a.ones: shape [100000, 100000] holds 10000000000 elements, more than "
            "limits.max_probe_tensor_elements (1000000); nothing was allocated"
        ),
    ),
    (
        "one element broadcast to 10^10",
        "inputs:\n  a: {ones: [1, 1]}\n",
        "cases.big.steps[0].broadcast_to: output shape [100000, 100000] holds 10000000000 elements",
    ),
    # A probe input's values may be non-finite (a causal mask's -inf); nothing else may.
    (
        "a .nan arange start",
        "inputs:\n  a: {arange: {start: .nan}, shape: [1, 1]}\n",
        "inputs.a.arange.start: .nan",
    ),
    (
        "a key given twice",
        "tolerance: {f32: 0}\ntolerance: {f32: 1}\n",
        "duplicate key 'tolerance'",
    ),
    # YAML 1.1 reads 1e-6 (no dot) as text; the loader reads it as the number it means, so
    # the file gets as far as the size limit of its steps.
    (
        "a tolerance written 1e-6 is read as a number",
        "tolerance: {f32: 1e-6}\n",
        "max_probe_tensor_elements",
    ),
]


@pytest.mark.parametrize(("what", "head", "message"), PROBE_CASES, ids=[c[0] for c in PROBE_CASES])
def test_bad_probe_file_is_refused_naming_file_and_field(tmp_path, what, head, message):
    folder = tmp_path / "myprobes"
    folder.mkdir()
    body = (
        "description: x\n"
        + head
        + "cases:\n  big:\n    steps:\n"
        + "      - broadcast_to: {in: a, shape: [100000, 100000], out: b}\n"
        + "    compare: [b]\n"
    )
    if "inputs:" not in head:
        body = "inputs:\n  a: {ones: [1, 1]}\n" + body
    (folder / "big.yaml").write_text(body)
    config = load_config()
    config["probes"] = {"folder": str(folder)}
    proc = run_workflow(tmp_path / "w", config, "-n", "--cores", "1", check=False)
    assert proc.returncode != 0, what
    assert "invalid config (nothing was run)" in proc.stdout
    assert f"big.yaml: {message}" in proc.stdout or message in proc.stdout, proc.stdout[-3000:]
    assert str(folder / "big.yaml") in proc.stdout
    assert not (tmp_path / "w" / "results").exists()


#: Targets (files under results/) naming what the config does not run: (target, message).
TARGETS = [
    (
        "results/tables/a9/perstep-cpu.csv",
        (
            "unknown experiment 'a9': a target names it but the config has no such experiment "
            "(experiments: a1_adam, a3_adam,"
        ),
    ),
    ("results/traces/a9/torch-f32-cpu.parquet", "unknown experiment 'a9'"),
    ("results/fixtures/a9.safetensors", "unknown experiment 'a9'"),
    ("results/figures/a9/split-cpu.png", "unknown experiment 'a9'"),
    (
        "results/tables/scale_mlp/perstep-cpu.csv",
        "experiment 'scale_mlp' is disabled in the config (enabled: false)",
    ),
    (
        "results/tables/a3_sgd/perstep-cpu-nope.csv",
        "experiment 'a3_sgd' has no comparison with file tag 'cpu-nope' (its tags: cpu,",
    ),
    (
        # candle's fused norm has no float64: no split table, and a clear word why
        "results/tables/transformer_fused/split-cpu.csv",
        (
            "transformer_fused cpu has no float64 runs (run torch or candle has no float64), "
            "so no split or diagnosis table; its per-step table is made by rule perstep"
        ),
    ),
    (
        "results/traces/a3_sgd/torch_x-f32-cpu.parquet",
        (
            "experiment 'a3_sgd' has no run 'torch_x' (its runs: burn, candle, torch, "
            "candle_v0_11_1, burn_v0_22_1_flex, burn_v0_23_0_pre_1_flex)"
        ),
    ),
]


@pytest.mark.parametrize(("target", "message"), TARGETS, ids=[t for t, _ in TARGETS])
def test_a_target_naming_an_unknown_experiment_names_it(tmp_path, target, message):
    proc = run_workflow(tmp_path, load_config(), "-n", "--cores", "1", target, check=False)
    assert proc.returncode != 0
    assert message in proc.stdout, proc.stdout[-3000:]
    assert "KeyError" not in proc.stdout


def test_config_on_the_command_line_naming_an_unknown_experiment_names_it(tmp_path):
    config = load_config()
    for option, message in [
        ("determinism={experiments: [a9]}", "determinism.experiments[0]: 'a9' is not an"),
        ("framework_summary=[{experiment: a9, label: x}]", "framework_summary[0].experiment"),
    ]:
        proc = run_workflow(tmp_path, config, "-n", "--config", option, check=False)
        assert proc.returncode != 0
        assert "invalid config (nothing was run)" in proc.stdout
        assert message in proc.stdout, proc.stdout[-3000:]
    config["faults"]["sensitivity"]["experiment"] = "a9"
    proc = run_workflow(tmp_path, config, "-n", "results/tables/sensitivity.csv", check=False)
    assert "unknown experiment 'a9'" in proc.stdout, proc.stdout[-3000:]


def _loop(tmp_path, name="loop"):
    """A symbolic link ``name`` in a loop of two."""
    (tmp_path / name).symlink_to(tmp_path / f"{name}_back")
    (tmp_path / f"{name}_back").symlink_to(tmp_path / name)
    return name


def _broken(tmp_path, name="gone"):
    """A symbolic link ``name`` to nothing."""
    (tmp_path / name).symlink_to(tmp_path / "nowhere")
    return name


def _a_file(tmp_path, name="plain"):
    (tmp_path / name).write_text("x")
    return name


#: A path the config names that does not resolve as meant: (what, make it in a folder and
#: return its name, what the refusal says after the path).
PATHS = [
    ("a loop of symbolic links", _loop, ": a loop of symbolic links"),
    ("a broken symbolic link", _broken, ": a broken symbolic link (to "),
    ("a file for a folder", _a_file, ": is a file, not a folder"),
]


@pytest.mark.parametrize(("what", "make", "message"), PATHS, ids=[p[0] for p in PATHS])
def test_a_probe_folder_that_does_not_resolve_is_refused_naming_the_key(
    tmp_path, what, make, message
):
    """Path.resolve() raised a bare RuntimeError on a loop; every path the config names is
    held to what the file system does with it, before any job."""
    folder = tmp_path / "given"
    folder.mkdir()
    value = str(folder / make(folder))
    config = load_config()
    config["probes"] = {"folder": value}
    proc = run_workflow(tmp_path / "w", config, "-n", "--cores", "1", check=False)
    assert proc.returncode != 0, what
    assert "invalid config (nothing was run)" in proc.stdout
    assert f"probes.folder: {value}{message}" in proc.stdout, proc.stdout[-3000:]
    assert "Traceback" not in proc.stdout and "RuntimeError" not in proc.stdout
    assert not (tmp_path / "w" / "results").exists()


#: A probe file's prose with a control character: (the file's head, the refusal).
PROSE = [
    (
        'description: "clears the screen \\e[2J"\ncases:\n  one:\n',
        "description: 'clears the screen \\x1b[2J' does not match",
    ),
    (
        'description: x\ncases:\n  one:\n    note: "NUL \\0 here"\n',
        "cases.one.note: 'NUL \\x00 here' does not match",
    ),
]
#: The rest of the probe file.
PROSE_BODY = (
    "    steps:\n      - relu: {in: a, out: b}\n    compare: [b]\n"
    "inputs:\n  a: {values: [1.0, 2.0]}\n"
)


@pytest.mark.parametrize(
    ("head", "message"), PROSE, ids=["escape in the description", "NUL in a case note"]
)
def test_probe_prose_with_a_control_character_is_refused(tmp_path, head, message):
    """A probe's description and case notes reach the probe table: YAML's folded line
    breaks are read as spaces (the repository's probes are written so), any other control
    character is refused, naming file and field."""
    folder = tmp_path / "myprobes"
    folder.mkdir()
    (folder / "p.yaml").write_text(head + PROSE_BODY)
    config = load_config()
    config["probes"] = {"folder": str(folder)}
    proc = run_workflow(tmp_path / "w", config, "-n", "--cores", "1", check=False)
    assert proc.returncode != 0
    assert "invalid config (nothing was run)" in proc.stdout
    assert f"{folder / 'p.yaml'}: {message}" in proc.stdout, proc.stdout[-3000:]
    # a folded description (line breaks, a tab) is one line, as before
    (folder / "p.yaml").write_text(
        "description: >\n  two\n  lines\tand a tab\ncases:\n  one:\n" + PROSE_BODY
    )
    proc = run_workflow(tmp_path / "w", config, "-n", "--cores", "1", check=False)
    assert proc.returncode == 0, proc.stdout[-3000:]


TEMPLATE = REPO / "examples" / "template" / "model.py"


def _own_config(**model) -> dict:
    """The default config with one own-model experiment ``mine`` (the template's model),
    run alone; ``model`` is merged into its model entry."""
    config = load_config()
    config["only"] = ["mine"]
    config["experiments"]["mine"] = {
        "model": {"family": "own", "torch": {"factory": f"{TEMPLATE}:make_model"}, **model},
        "loss": "mse",
        "data": {
            "seed": 3,
            "batches": 2,
            "batch_size": 3,
            "inputs": {"shape": [4]},
            "targets": {"shape": [2]},
        },
        "optimizer": {"name": "sgd", "lr": 0.1},
        "steps": 2,
        "runs": {"torch": {}, "torch_foreach": {"optimizer_path": "foreach"}},
        "comparisons": {"main": {"reference": "torch", "candidate": "torch_foreach"}},
    }
    return config


def _crate(folder, manifest='[package]\nname = "port"\n'):
    (folder / "port").mkdir()
    (folder / "port" / "Cargo.toml").write_text(manifest)
    return "port"


def _data_file(folder, mangle=None):
    """A data file of inputs x [2, 3, 4] and targets y [2, 3, 2], its bytes passed
    through ``mangle``."""
    import numpy as np
    from safetensors.numpy import save

    data = save({"x": np.ones((2, 3, 4), np.float32), "y": np.zeros((2, 3, 2), np.float32)})
    (folder / "data.safetensors").write_bytes(mangle(data) if mangle else data)
    return "data.safetensors"


def _header(doc):
    """Bytes of a safetensors file whose header is ``doc`` (JSON) and nothing else."""
    import json

    text = json.dumps(doc).encode()
    return len(text).to_bytes(8, "little") + text


def _with_candle(config, crate):
    exp = config["experiments"]["mine"]
    exp["model"]["candle"] = {"crate": crate, "model": "Port"}
    exp["runs"]["candle"] = {}
    return config


def _with_file(config, name):
    data = config["experiments"]["mine"]["data"]
    del data["inputs"], data["targets"]
    data["file"] = name
    return config


#: An own model's paths and files that do not resolve or are malformed: (what, make the
#: config in the working folder, the refusal).
OWN = [
    (
        "a factory file in a loop of symbolic links",
        lambda w: _own_config(torch={"factory": f"{_loop(w, 'model.py')}:make"}),
        "experiments.mine.model.torch.factory: model.py (",
        ": a loop of symbolic links",
    ),
    (
        "an optimizer file that does not exist",
        lambda w: _own_config(
            torch={"factory": f"{TEMPLATE}:make_model", "optimizer": "opt.py:make"}
        ),
        "experiments.mine.model.torch.optimizer: opt.py (",
        "/opt.py): does not exist",
    ),
    (
        "a crate that is a broken symbolic link",
        lambda w: _with_candle(_own_config(), _broken(w, "port")),
        "experiments.mine.model.candle.crate: port (",
        ": a broken symbolic link (to ",
    ),
    (
        "a crate whose Cargo.toml is not TOML",
        lambda w: _with_candle(_own_config(), _crate(w, "[package\n")),
        "experiments.mine.model.candle.crate: ",
        "/port/Cargo.toml: not a readable Cargo.toml (",
    ),
    (
        "a crate whose Cargo.toml has no package name",
        lambda w: _with_candle(_own_config(), _crate(w, "[dependencies]\n")),
        "experiments.mine.model.candle.crate: ",
        "/port/Cargo.toml has no [package] name: not a library crate",
    ),
    (
        "two Rust names renamed to one state_dict key",
        lambda w: _with_candle(
            _own_config(rename={"candle": {"a.weight": "0.weight", "b.weight": "0.weight"}}),
            _crate(w),
        ),
        "experiments.mine.model.rename.candle.b.weight: '0.weight' is already the key of Rust",
        " tensor 'a.weight': one state_dict key, one Rust name",
    ),
    (
        "a data file that is a folder",
        lambda w: (w / "data").mkdir() or _with_file(_own_config(), "data"),
        "experiments.mine.data.file: data (",
        "/data): is a folder, not a file",
    ),
    (
        "a data file whose header is a JSON list",
        lambda w: _with_file(_own_config(), _data_file(w, lambda b: _header([1, 2]))),
        "experiments.mine.data.file: data.safetensors: not a readable safetensors file ",
        "(its header is a JSON list, not an object)",
    ),
    (
        "a data file whose tensor entry is not an object",
        lambda w: _with_file(
            _own_config(), _data_file(w, lambda b: _header({"x": "F32", "y": "F32"}))
        ),
        "experiments.mine.data.file: data.safetensors: not a readable safetensors file ",
        "(tensor 'x': its header entry is not an object)",
    ),
    (
        "a data file cut short",
        lambda w: _with_file(_own_config(), _data_file(w, lambda b: b[:-8])),
        "experiments.mine.data.file: data.safetensors: not a readable safetensors file ",
        "(its tensors hold 144 bytes, the file 136 after the header)",
    ),
]


@pytest.mark.parametrize(("what", "make", "head", "tail"), OWN, ids=[o[0] for o in OWN])
def test_an_own_models_path_or_file_is_refused_before_any_job(tmp_path, what, make, head, tail):
    """Each is one line naming the key, never a RuntimeError or AttributeError traceback;
    no fixture, trace or build is made (only the model card, where the model was built)."""
    work = tmp_path / "w"
    work.mkdir()
    config = make(work)
    proc = run_workflow(work, config, "-n", "--cores", "1", check=False)
    assert proc.returncode != 0, what
    assert "invalid config (nothing was run)" in proc.stdout
    line = next((ln for ln in proc.stdout.splitlines() if head in ln), "")
    assert tail in line, proc.stdout[-3000:]
    assert "Traceback" not in proc.stdout
    results = work / "results"
    made = {p.relative_to(work).as_posix() for p in results.rglob("*") if p.is_file()}
    assert made <= {"results/own/mine/card.json"}, made


@pytest.mark.parametrize(
    ("what", "make", "message"),
    [
        ("a FIFO", lambda p: os.mkfifo(p), "is not a regular file (a device, a FIFO or a socket)"),
        ("a loop", lambda p: p.symlink_to(p), "a loop of symbolic links"),
        ("a folder", lambda p: p.mkdir(), "is a folder, not a file"),
    ],
    ids=["a FIFO", "a loop", "a folder"],
)
def test_a_probe_entry_that_is_not_a_file_is_refused_without_opening_it(
    tmp_path, what, make, message
):
    """A ``*.yaml`` in the probes folder that is not a regular file is named as what it is;
    a FIFO is never opened (the reader would wait for a writer for ever)."""
    folder = tmp_path / "myprobes"
    folder.mkdir()
    make(folder / "odd.yaml")
    config = load_config()
    config["probes"] = {"folder": str(folder)}
    proc = run_workflow(tmp_path / "w", config, "-n", "--cores", "1", check=False, timeout=300)
    assert proc.returncode != 0, what
    assert "invalid config (nothing was run)" in proc.stdout
    assert f"{folder / 'odd.yaml'}: not a readable probe file: {message}" in proc.stdout, (
        proc.stdout[-3000:]
    )


#: A remote host's identity or ssh_config that is not there: (key, value, refusal's tail).
REMOTE_PATHS = [
    ("identity", "/nonexistent/id_key", "/nonexistent/id_key: does not exist"),
    ("ssh_config", "/nonexistent/ssh_config", "/nonexistent/ssh_config: does not exist"),
    ("identity", "~/nonexistent-parity-key", "/nonexistent-parity-key: does not exist"),
    ("identity", "/dev/null", "/dev/null: is not a regular file"),
]


@pytest.mark.parametrize(("key", "value", "message"), REMOTE_PATHS, ids=repr)
def test_a_remote_hosts_missing_identity_or_ssh_config_is_refused_at_plan_time(
    tmp_path, key, value, message
):
    """ssh would only say the host is unreachable; a dry run already names the key and the
    path (~ expanded as ssh does), and /dev/null stays an ssh_config."""
    config = load_config()
    config["remote"] = {
        "far": {
            "ssh": "localhost",
            "path": "~/p",
            "devices": ["cpu"],
            "ssh_config": "/dev/null",
            key: value,
        }
    }
    proc = run_workflow(tmp_path, config, "-n", "--cores", "1", "remote", check=False)
    assert proc.returncode != 0
    line = next((ln for ln in proc.stdout.splitlines() if f"remote.far.{key}: " in ln), None)
    assert line is not None, proc.stdout[-3000:]
    assert message in line, line
    assert not (tmp_path / "results").exists()


def test_a_remote_hosts_ssh_config_may_be_dev_null_at_plan_time(tmp_path):
    key = tmp_path / "id_key"
    key.write_text("not a real key\n")
    config = load_config()
    config["remote"] = {
        "far": {
            "ssh": "localhost",
            "path": "~/p",
            "devices": ["cpu"],
            "ssh_config": "/dev/null",
            "identity": str(key),
        }
    }
    proc = run_workflow(tmp_path / "w", config, "-n", "--cores", "1", "remote", check=False)
    assert proc.returncode == 0, proc.stdout[-3000:]
