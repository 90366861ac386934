"""The bodies of the warm-started adapters (PyTorch runs, probes and defaults;
comparisons; localisations): one module per adapter, named after it and its rule, each a
``main(sm)`` taking the job's ``snakemake`` object. The adapter (scripts/<same name>.py)
hands it to :func:`parity.core.warm.run_job`, which runs it in a fork of an interpreter
that has already imported torch, numpy, pyarrow and matplotlib, or in the job's own
process. A body does what an adapter does: it reads what Snakemake gives the job and calls
its stage's code (a job function such as ``parity.compare.job.compare``, or a runner such
as ``parity.train.torch.train``). Nothing is imported at module level beyond what the
job's own process needs to name the function.

Docstring only: a module of this package loads it first, so an import here
would widen every module's code hash (parity.core.codeversion)."""
