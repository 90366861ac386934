"""Training-step parity between PyTorch, candle and burn: the workflow's Python side.

One concern per module; docs/architecture.md has the module map (checked by
tests/test_docs.py). Nothing here imports torch, numpy or pyarrow at module import time
except the modules that need them, so building the DAG stays fast.
"""
