# One target per device: `snakemake --cores 8 cuda` runs only that device's jobs and its
# comparisons and probes, reusing traces already present (the CPU reference runs).


include: "functions/devices.smk"


rule cpu:
    """Every comparison and probe on the CPU."""
    input:
        lambda wc: device_outputs("cpu"),
    localrule: True


rule cuda:
    """Every comparison and probe on the first NVIDIA GPU."""
    input:
        lambda wc: device_outputs("cuda"),
    localrule: True


rule metal:
    """Every comparison and probe on the Apple GPU (float64 cells taken from the CPU)."""
    input:
        lambda wc: device_outputs("metal"),
    localrule: True
