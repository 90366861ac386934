# The input and params functions of rules/detection.smk (Snakemake's linter keeps functions
# out of a file of rules); included at its top.


def sensitivity_inputs(wildcards):
    """The clean run's float32 CPU trace, the fixture and, for a Rust run, its binary."""
    s = PLAN.sensitivity
    if s is None:
        named = config.get("faults", {}).get("sensitivity")
        if named is None:
            raise WorkflowError("config faults.sensitivity is not set")
        known_experiment(named["experiment"])
    e = s["experiment"]
    out = {
        "reference": paths.TRACE.format(
            experiment=e, run=s["against"], dtype="f32", device="cpu"
        ),
        "fixture": PLAN.fixture(e),
    }
    if s["settings"]["framework"] != "torch":
        out["binary"] = versions.run_binary(s["settings"], "cpu")
    return out


SENSITIVITY_OUTPUTS = [
    "results/tables/sensitivity.csv",
    "results/tables/sensitivity.md",
    "results/tables/sensitivity.html",
    "results/figures/sensitivity.png",
    "results/figures/sensitivity.svg",
]
