#!/usr/bin/env python3
"""Writes schemas/config.schema.json from schemas/config.schema.yaml, the source (with its
comments), so that Snakemake reads the config schema as JSON on every start.

Snakemake's ``validate`` loads a YAML schema with yte's pure-Python YAML parser: 0.09 s
for this schema on a 2-core AMD EPYC (yte and PyYAML already imported), against 0.5 ms for
the same schema as JSON, on every run and every dry run (docs/performance.md, "The no-op
rerun").

    python scripts/dev/schema_json.py           # rewrite schemas/config.schema.json
    python scripts/dev/schema_json.py --check   # exit 1 when the file is not current

``tests/test_schema_patterns.py`` holds the committed file equal to :func:`render`.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
SOURCE = REPO / "schemas" / "config.schema.yaml"
OUTPUT = REPO / "schemas" / "config.schema.json"


def render() -> str:
    """The JSON text of the YAML schema (keys in the source's order, two-space indent, a
    final newline)."""
    with open(SOURCE, encoding="utf-8") as f:
        schema = yaml.load(f, Loader=yaml.CSafeLoader)
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    text = render()
    if args.check:
        if OUTPUT.read_text(encoding="utf-8") != text:
            print(f"{OUTPUT} is not current: run python scripts/dev/schema_json.py")
            return 1
        return 0
    OUTPUT.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
