"""The bodies of the warm-started jobs (PyTorch runs, probes and defaults; comparisons;
localisations), one module per job, each a ``main(sm)`` taking the job's ``snakemake``
object. Their scripts (scripts/<same name>.py) hand them to
:func:`parity.core.warm.run_job`, which runs them in a fork of an interpreter that has
already imported torch, numpy, pyarrow and matplotlib, or in the job's own process.
Nothing is imported at module level beyond what the job's own process needs to name the
function.

Docstring only: a module of this package loads it first, so an import here
would widen every module's code hash (parity.core.codeversion)."""
