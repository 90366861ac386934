# The input and params functions of rules/fixtures.smk (Snakemake's linter keeps functions
# out of a file of rules); included at its top.


def fixture_settings(wildcards):
    """What a fixture job draws from (Plan.fixture_settings)."""
    return PLAN.fixture_settings(known_experiment(wildcards.experiment))
