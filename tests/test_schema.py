"""The trace schema: written once, checked on write and on read."""

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from parity import integrity
from parity.schema import (
    METADATA_KEY,
    TraceError,
    TraceLayout,
    TraceReader,
    TraceWriter,
    recorded_steps,
)

from conftest import base_meta, write_trace

STEPS = [{"fc1.weight": [1.0, 2.0, 3.0, 4.0], "fc1.bias": [0.5, -0.5]}] * 3
SHAPES = {"fc1.weight": (2, 2), "fc1.bias": (2,)}


def good(tmp_path, **kw):
    return write_trace(tmp_path / "t.parquet", STEPS, shapes=SHAPES, **kw)


def rewrite(path, table, meta):
    """Write ``table`` back with trace metadata ``meta`` (a file made wrong by a writer, not
    corrupted afterwards: its metadata is sealed, its pages checksummed)."""
    sealed = integrity.seal(METADATA_KEY, json.dumps(meta))
    pq.write_table(table.replace_schema_metadata(sealed), path, **integrity.PARQUET_WRITE)


def test_round_trip_keeps_values_dtype_and_metadata(tmp_path):
    r = TraceReader(good(tmp_path))
    assert r.steps == [0, 1, 2]
    assert r.meta["status"] == "complete" and r.meta["dtype"] == "f32"
    rec = r.read_step(1)
    assert rec.loss == 1.0
    assert rec.tensors["fc1.weight"].dtype == np.float32
    assert rec.tensors["fc1.weight"].tolist() == [1.0, 2.0, 3.0, 4.0]
    assert r.read_step(0).loss is None


def test_schema_columns_and_types(tmp_path):
    schema = TraceLayout.of("f64", SHAPES.items()).arrow_schema()
    assert schema.field("step").type == pa.int32()
    assert schema.field("loss").type == pa.float64()
    element = pa.field("element", pa.float64(), nullable=False)
    assert schema.field("fc1.weight").type == pa.list_(element, 4)
    assert not schema.field("fc1.weight").nullable


def test_recorded_steps_keep_first_and_last():
    assert recorded_steps(10, 4) == [0, 4, 8, 10]
    assert recorded_steps(3, 1) == [0, 1, 2, 3]


def test_missing_column_is_named(tmp_path):
    path = good(tmp_path)
    table = pq.read_table(path).drop_columns(["fc1.bias"])
    rewrite(path, table, TraceReader(path).meta)
    with pytest.raises(TraceError, match=r"column 'fc1\.bias' is missing"):
        TraceReader(path)


def test_renamed_parameter_is_named(tmp_path):
    path = good(tmp_path)
    meta = TraceReader(path).meta
    table = pq.read_table(path).rename_columns(["step", "loss", "fc1.weight", "fc1.b"])
    rewrite(path, table, meta)
    with pytest.raises(TraceError, match=r"'fc1\.bias' is missing"):
        TraceReader(path)


def test_wrong_dtype_column_is_named(tmp_path):
    path = good(tmp_path)
    meta = TraceReader(path).meta
    table = pq.read_table(path)
    i = table.schema.get_field_index("fc1.bias")
    table = table.set_column(i, "fc1.bias", table.column(i).cast(pa.list_(pa.float64(), 2)))
    # the values as float64: the trace's layout says float32
    rewrite(path, table, meta)
    with pytest.raises(
        TraceError,
        match=r"column 'fc1.bias' has type fixed_size_list<element: double>\[2\], expected",
    ):
        TraceReader(path)


def test_reshaped_parameter_is_named(tmp_path):
    path = good(tmp_path)
    with pytest.raises(
        TraceError, match=r"parameter 'fc1.weight' has shape \[2, 2\], expected \[4, 1\]"
    ):
        TraceReader(path, expect={"params": {"fc1.weight": (4, 1), "fc1.bias": (2,)}})


def test_trace_from_another_experiment_is_refused(tmp_path):
    with pytest.raises(TraceError, match="metadata 'experiment' is 'hand', expected 'a3_adamw'"):
        TraceReader(good(tmp_path), expect={"experiment": "a3_adamw"})


def test_missing_step_is_named(tmp_path):
    path = good(tmp_path)
    meta = TraceReader(path).meta
    table = pq.read_table(path)
    rewrite(path, table.filter(pa.compute.not_equal(table.column("step"), 1)), meta)
    with pytest.raises(TraceError, match="step 1 is missing"):
        TraceReader(path)


def test_truncated_file_is_refused(tmp_path):
    path = good(tmp_path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(TraceError, match="not a readable Parquet file"):
        TraceReader(path)


def test_parquet_without_trace_metadata_is_refused(tmp_path):
    path = tmp_path / "plain.parquet"
    pq.write_table(pa.table({"step": [0]}), path)
    with pytest.raises(TraceError, match=r"no 'parity\.trace' metadata"):
        TraceReader(path)


def test_writer_refuses_wrong_dtype_and_unknown_columns(tmp_path):
    layout = TraceLayout.of("f32", SHAPES.items())
    with TraceWriter(tmp_path / "w.parquet", layout, base_meta()) as w:
        with pytest.raises(TraceError, match="has dtype float64, expected float32"):
            w.write_step(0, None, {"fc1.weight": np.zeros(4), "fc1.bias": np.zeros(2)})
        with pytest.raises(TraceError, match=r"column 'fc9\.bias' is not in the layout"):
            w.write_step(0, None, {"fc9.bias": np.zeros(2, np.float32)})
        with pytest.raises(TraceError, match="has 3 values, expected 2"):
            w.write_step(
                0,
                None,
                {"fc1.weight": np.zeros(4, np.float32), "fc1.bias": np.zeros(3, np.float32)},
            )
        w.abort()
    assert not (tmp_path / "w.parquet").exists()


def test_writer_publishes_nothing_when_the_run_stops_early(tmp_path):
    layout = TraceLayout.of("f32", SHAPES.items())
    w = TraceWriter(tmp_path / "w.parquet", layout, base_meta())
    w.write_step(
        0, None, {"fc1.weight": np.zeros(4, np.float32), "fc1.bias": np.zeros(2, np.float32)}
    )
    with pytest.raises(TraceError, match="ends before step 1"):
        w.close()
    assert list(tmp_path.iterdir()) == []


def test_non_finite_values_mark_the_run_diverged(tmp_path):
    steps = [{"w": [1.0]}, {"w": [np.inf]}, {"w": [np.nan]}]
    r = TraceReader(write_trace(tmp_path / "d.parquet", steps, losses=[None, 1.0, np.nan]))
    assert r.meta["status"] == "diverged" and r.diverged_step == 1
    assert np.isnan(r.read_step(2).tensors["w"][0])
