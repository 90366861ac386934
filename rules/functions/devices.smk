# The input and params functions of rules/devices.smk (Snakemake's linter keeps functions
# out of a file of rules); included at its top.


def device_outputs(device):
    """A per-device target: that device's comparisons and probe results (with the
    reference runs they need, which are reused where present)."""
    require_device(device)
    return (
        tables_and_figures(PLAN.for_devices([device]).comparisons())
        + PROBES.for_devices([device]).results()
    )
