"""Training-step parity between PyTorch and candle: the workflow's Python side.

Modules, one concern each:

* ``experiments``: the experiment definitions; turns ``config.yaml`` into runs and comparisons.
* ``schema``: the Parquet trace schema, its writer and its checked reader.
* ``fixtures``: initial weights and data, drawn in float64 and rounded to float32 once.
* ``torch_runner`` / ``rust_runner``: one training run each, writing a trace (the Rust
  runners, candle's and any other, share one frame protocol and one wrapper).
* ``compare``: the comparison maths; every table is a view of it.
* ``verdicts``: the fixed verdict vocabulary.
* ``tables`` / ``figures``: CSV, Markdown and PNG renderings.

Nothing here imports torch, numpy or pyarrow at module import time except the modules that
need them, so building the DAG stays fast.
"""
