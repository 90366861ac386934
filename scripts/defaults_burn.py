"""Snakemake job: burn's optimizer defaults, printed by the burn-parity binary."""

import json

from parity import defaults
from parity.fileio import job_logger, write_text_atomic

sm = snakemake  # noqa: F821
log = job_logger(sm.log[0])
write_text_atomic(sm.output[0], json.dumps(defaults.burn_defaults(sm.input.binary), indent=1))
