"""Snakemake job: candle-nn's optimizer defaults, printed by the candle-parity binary."""

import json

from parity import defaults
from parity.fileio import job_logger, write_text_atomic

sm = snakemake  # noqa: F821
log = job_logger(sm.log[0])
write_text_atomic(sm.output[0], json.dumps(defaults.candle_defaults(sm.input.binary), indent=1))
