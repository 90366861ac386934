"""Snakemake job: PyTorch's optimizer defaults, read from torch itself."""

import json

from parity import defaults
from parity.fileio import job_logger, write_text_atomic

sm = snakemake  # noqa: F821
log = job_logger(sm.log[0])
write_text_atomic(sm.output[0], json.dumps(defaults.torch_defaults(), indent=1))
