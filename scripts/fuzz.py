"""Snakemake job: one layout-fuzzing campaign (parity.fuzz), config block ``fuzz``:
findings table, summary, one probe file and one reproduction per finding."""

import json
import platform
import shutil
import time

from parity.core.fileio import job_logger
from parity.fuzz import campaign, check, report

sm = snakemake  # noqa: F821
log = job_logger(sm.log[0])
settings = sm.params.fuzz
binaries = dict(zip(settings["frameworks"], sm.input.binaries, strict=True))
runners = check.Runners(binaries, sm.threads, log, sm.log[0])
t0 = time.monotonic()
result = campaign.campaign(
    settings["seed"],
    settings["ops"],
    settings["cases_per_op"],
    settings["frameworks"],
    settings["dtypes"],
    runners,
    shrinks_per_class=settings["shrinks_per_class"],
)
for d in (sm.output.probes, sm.output.repro):
    shutil.rmtree(d, ignore_errors=True)
rows = report.write(
    result,
    settings["seed"],
    list(sm.input.known),
    sm.output.csv,
    sm.output.md,
    sm.output.probes,
    sm.output.repro,
    settings,
)
summary = {
    "settings": settings,
    "cases": result.cases,
    "failing_cases": result.failing_cases,
    "findings": len(rows),
    "new": sum(1 for r in rows if r["known_bug"] == "new"),
    "control_failures": {n: [f.quantity for f in v] for n, v in result.control_failures.items()},
    "seconds": {**result.seconds, "job": time.monotonic() - t0},
    "threads": sm.threads,
    "machine": f"{platform.machine()}, {platform.processor() or platform.node()}",
}
with open(sm.output.summary, "w", encoding="utf-8") as f:
    json.dump(summary, f, indent=2)
log.info("%d findings (%d new); control: %d failing cases", len(rows), summary["new"],
         len(result.control_failures))  # fmt: skip
