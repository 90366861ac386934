"""The trace schema: written once, checked on write and on read."""

import json
import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from parity.core import integrity
from parity.trace import schema, writer
from parity.trace.reader import TraceReader
from parity.trace.schema import (
    INDEX_KEY,
    METADATA_KEY,
    TraceError,
    TraceLayout,
    extra_column,
    loss_bits,
    recorded_steps,
)
from parity.trace.writer import TraceWriter

from conftest import REPO, base_meta, write_trace

STEPS = [{"fc1.weight": [1.0, 2.0, 3.0, 4.0], "fc1.bias": [0.5, -0.5]}] * 3
SHAPES = {"fc1.weight": (2, 2), "fc1.bias": (2,)}


def good(tmp_path, **kw):
    return write_trace(tmp_path / "t.parquet", STEPS, shapes=SHAPES, **kw)


def footer(path):
    """(trace metadata, index) of a trace, as written."""
    kv = pq.ParquetFile(path).metadata.metadata
    return json.loads(kv[METADATA_KEY]), json.loads(kv[INDEX_KEY])


def rewrite(path, table, meta, index, **kw):
    """Write ``table`` back with trace metadata ``meta`` and ``index`` (a file made wrong
    by a writer, not corrupted afterwards: its metadata is sealed, its pages checksummed)."""
    sealed = {
        **integrity.seal(METADATA_KEY, json.dumps(meta)),
        **integrity.seal(INDEX_KEY, json.dumps(index)),
    }
    pq.write_table(table.replace_schema_metadata(sealed), path, **integrity.PARQUET_WRITE, **kw)


def odd_values(dtype, n, rng):
    """``n`` values of ``dtype`` with the bit patterns a round trip could lose: ±0, ±Inf,
    a NaN with a payload, the smallest subnormal, the largest finite value."""
    values = rng.standard_normal(n).astype(dtype)
    bits = values.view(np.uint32 if dtype == np.float32 else np.uint64)
    nan = 0x7FC00123 if dtype == np.float32 else 0x7FF8000000000123
    special = [0x80000000, 0x7F800000, 0xFF800000, nan, 0x00000001, 0x7F7FFFFF]
    if dtype == np.float64:
        special = [1 << 63, 0x7FF0 << 48, 0xFFF0 << 48, nan, 1, 0x7FEFFFFFFFFFFFFF]
    bits[: len(special)] = special
    return values


@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_round_trip_is_bit_for_bit(tmp_path, dtype):
    np_dtype = np.float32 if dtype == "f32" else np.float64
    rng = np.random.default_rng(1)
    steps = [
        {"fc1.weight": odd_values(np_dtype, 12, rng), "fc1.bias": odd_values(np_dtype, 6, rng)}
        for _ in range(4)
    ]
    nan_payload = np.frombuffer(bytes.fromhex("fff8000000000bad")[::-1], np.float64)[0]
    losses = [None, 1.0 / 3.0, -0.0, nan_payload]
    path = write_trace(
        tmp_path / "t.parquet",
        steps,
        dtype,
        losses,
        shapes={"fc1.weight": (3, 4), "fc1.bias": (6,)},
    )
    r = TraceReader(path)
    assert r.steps == [0, 1, 2, 3]
    for want, loss, rec in zip(steps, losses, r.iter_steps(), strict=True):
        assert loss_bits(rec.loss) == loss_bits(loss)
        for n, v in want.items():
            assert rec.tensors[n].dtype == np_dtype
            assert rec.tensors[n].tobytes() == v.tobytes()
        assert rec.flat.tobytes() == want["fc1.weight"].tobytes() + want["fc1.bias"].tobytes()
    assert r.read_step(3).tensors["fc1.bias"].tobytes() == steps[3]["fc1.bias"].tobytes()


def test_round_trip_keeps_values_dtype_and_metadata(tmp_path):
    r = TraceReader(good(tmp_path))
    assert r.steps == [0, 1, 2]
    assert r.meta["status"] == "complete" and r.meta["dtype"] == "f32"
    assert r.meta["schema_version"] == schema.SCHEMA_VERSION == 3
    rec = r.read_step(1)
    assert rec.loss == 1.0
    assert rec.tensors["fc1.weight"].dtype == np.float32
    assert rec.tensors["fc1.weight"].tolist() == [1.0, 2.0, 3.0, 4.0]
    assert r.read_step(0).loss is None
    assert r.read_step(2, ["fc1.bias"]).tensors.keys() == {"fc1.bias"}
    assert r.read_step(2, ["fc1.bias"]).flat is None


def test_schema_is_one_flat_non_null_float_column():
    for dtype, kind in (("f32", pa.float32()), ("f64", pa.float64())):
        s = TraceLayout.of(dtype, SHAPES.items()).arrow_schema()
        assert s.names == ["value"]
        assert s.field("value").type == kind and not s.field("value").nullable


def test_pyarrow_and_pandas_read_a_trace_without_nesting(tmp_path):
    """What any Parquet reader sees: one typed float column, the steps as blocks of rows
    whose first rows the sealed index gives, the parameters in state_dict order."""
    rng = np.random.default_rng(2)
    steps = [{"fc1.weight": rng.standard_normal(4), "fc1.bias": rng.standard_normal(2)}] * 3
    path = write_trace(tmp_path / "t.parquet", steps, "f64", shapes=SHAPES)
    table = pq.read_table(path)
    assert not any(pa.types.is_nested(f.type) for f in table.schema)
    assert table.schema.field("value").type == pa.float64()
    frame = pd.read_parquet(path)
    assert list(frame.columns) == ["value"] and frame["value"].dtype == np.float64
    meta, index = footer(path)
    assert [n for n, _ in meta["params"]] == ["fc1.weight", "fc1.bias"]
    assert index["steps"] == [0, 1, 2] and index["offsets"] == [0, 6, 12]
    at = index["offsets"][2] + 4  # fc1.bias follows fc1.weight's four values
    assert frame["value"].to_numpy()[at : at + 2].tobytes() == steps[2]["fc1.bias"].tobytes()


def test_extras_are_absent_where_null(tmp_path):
    layout = TraceLayout.of("f32", [("w", (2,))], [extra_column("grad", "w")])
    meta = base_meta(steps=2)
    w32 = np.float32
    with TraceWriter(tmp_path / "x.parquet", layout, meta) as w:
        w.write_step(0, None, {"w": np.array([1, 2], w32)})
        w.write_step(1, 0.5, {"w": np.array([3, 4], w32), "grad:w": np.array([5, 6], w32)})
        w.write_step(2, 0.25, {"w": np.array([7, 8], w32)})
    r = TraceReader(tmp_path / "x.parquet")
    recs = list(r.iter_steps(["w", "grad:w"]))
    assert [sorted(rec.tensors) for rec in recs] == [["w"], ["grad:w", "w"], ["w"]]
    assert recs[1].tensors["grad:w"].tolist() == [5, 6]
    assert recs[2].tensors["w"].tolist() == [7, 8]
    assert footer(tmp_path / "x.parquet")[1]["absent"] == {"grad:w": [0, 2]}


def test_streaming_reads_one_row_group_at_a_time(tmp_path, monkeypatch):
    """Steps larger than a row group's budget are one row group each, and iter_steps reads
    the next only when the step before has been taken."""
    monkeypatch.setattr(writer, "ROW_GROUP_BYTES", 64)
    rng = np.random.default_rng(3)
    steps = [{"w": rng.standard_normal(20)} for _ in range(5)]
    path = write_trace(tmp_path / "s.parquet", steps, "f64")
    r = TraceReader(path)
    assert r._file.num_row_groups == 5
    reads = []
    real = r._file.read_row_group
    monkeypatch.setattr(r._file, "read_row_group", lambda g, **kw: reads.append(g) or real(g, **kw))
    it = r.iter_steps()
    first = next(it)
    assert reads == [0] and first.tensors["w"].tobytes() == steps[0]["w"].tobytes()
    rest = list(it)
    assert reads == [0, 1, 2, 3, 4]
    assert [rec.tensors["w"].tobytes() for rec in rest] == [s["w"].tobytes() for s in steps[1:]]
    reads.clear()
    assert r.read_step(3).tensors["w"].tobytes() == steps[3]["w"].tobytes() and reads == [3]


def test_small_steps_share_a_row_group(tmp_path):
    r = TraceReader(good(tmp_path))
    assert r._file.num_row_groups == 1


def test_a_step_spanning_row_groups_is_read_whole(tmp_path):
    """Parquet caps a row group at 64Mi rows, so a larger step spans row groups: written
    here with row groups of 5 rows across steps of 6."""
    path = good(tmp_path)
    meta, index = footer(path)
    rewrite(path, pq.read_table(path), meta, index, row_group_size=5)
    r = TraceReader(path)
    assert r._file.num_row_groups == 4
    for rec in r.iter_steps():
        assert rec.tensors["fc1.weight"].tolist() == [1, 2, 3, 4]
        assert rec.tensors["fc1.bias"].tolist() == [0.5, -0.5]
    assert r.read_step(1).tensors["fc1.bias"].tolist() == [0.5, -0.5]
    assert r.read_step(2).flat.tolist() == [1, 2, 3, 4, 0.5, -0.5]


def test_a_trace_of_an_older_schema_version_is_refused(tmp_path):
    """A version 2 trace (one fixed-size-list column per parameter) as version 2 wrote it."""
    path = good(tmp_path)
    meta = {**footer(path)[0], "schema_version": 2}
    element = pa.field("element", pa.float32(), nullable=False)
    old = pa.table(
        {
            "step": pa.array([0, 1, 2], pa.int32()),
            "loss": pa.array([None, 1.0, 1.0], pa.float64()),
            "fc1.weight": pa.array([[1.0, 2.0, 3.0, 4.0]] * 3, pa.list_(element, 4)),
            "fc1.bias": pa.array([[0.5, -0.5]] * 3, pa.list_(element, 2)),
        }
    )
    sealed = integrity.seal(METADATA_KEY, json.dumps(meta))
    pq.write_table(old.replace_schema_metadata(sealed), path, **integrity.PARQUET_WRITE)
    with pytest.raises(TraceError, match="schema_version 2 is not 3; rerun the job"):
        TraceReader(path)


def test_missing_value_column_is_named(tmp_path):
    path = good(tmp_path)
    meta, index = footer(path)
    table = pq.read_table(path).rename_columns(["values"])
    rewrite(path, table, meta, index)
    with pytest.raises(TraceError, match=r"column 'value' is missing"):
        TraceReader(path)


def test_an_extra_column_is_named(tmp_path):
    path = good(tmp_path)
    meta, index = footer(path)
    table = pq.read_table(path)
    rewrite(path, table.append_column("fc1.bias", table.column("value")), meta, index)
    with pytest.raises(TraceError, match=r"column 'fc1\.bias' is not in the trace's layout"):
        TraceReader(path)


def test_renamed_parameter_is_named(tmp_path):
    path = good(tmp_path)
    meta, index = footer(path)
    meta["params"] = [["fc1.weight", [2, 2]], ["fc1.b", [2]]]
    rewrite(path, pq.read_table(path), meta, index)
    with pytest.raises(TraceError, match=r"'fc1\.bias' is missing"):
        TraceReader(path, expect={"params": SHAPES})


def test_wrong_dtype_column_is_named(tmp_path):
    path = good(tmp_path)
    meta, index = footer(path)
    table = pq.read_table(path)
    # the values as float64: the trace's metadata says float32
    wide = pa.schema([pa.field("value", pa.float64(), nullable=False)])
    table = pa.table({"value": table.column("value").cast(pa.float64())}, wide)
    rewrite(path, table, meta, index)
    with pytest.raises(
        TraceError, match=r"column 'value' has type double, expected float not null"
    ):
        TraceReader(path)


def test_nullable_value_column_is_refused(tmp_path):
    path = good(tmp_path)
    meta, index = footer(path)
    values = pq.read_table(path).column("value")
    rewrite(path, pa.table({"value": values}, pa.schema([("value", pa.float32())])), meta, index)
    with pytest.raises(TraceError, match=r"has type float \(nullable\), expected float not null"):
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
    meta, index = footer(path)
    table = pq.read_table(path).slice(0, 12)  # steps 0 and 2 only
    index = {"steps": [0, 2], "loss": [None, index["loss"][2]], "offsets": [0, 6], "absent": {}}
    rewrite(path, table, meta, index)
    with pytest.raises(TraceError, match="step 1 is missing"):
        TraceReader(path)


def test_values_missing_from_a_step_are_refused(tmp_path):
    path = good(tmp_path)
    meta, index = footer(path)
    rewrite(path, pq.read_table(path).slice(0, 17), meta, index)
    with pytest.raises(TraceError, match="holds 17 values where its steps' tensors make 18"):
        TraceReader(path)


def test_an_index_that_does_not_match_the_layout_is_refused(tmp_path):
    path = good(tmp_path)
    meta, index = footer(path)
    rewrite(path, pq.read_table(path), meta, {**index, "offsets": [0, 6, 13]})
    with pytest.raises(TraceError, match="index offsets do not match"):
        TraceReader(path)
    rewrite(path, pq.read_table(path), meta, {**index, "loss": [None, "3ff0", None]})
    with pytest.raises(TraceError, match="index is malformed"):
        TraceReader(path)


def test_missing_or_altered_index_is_refused(tmp_path):
    path = good(tmp_path)
    meta, index = footer(path)
    table = pq.read_table(path)
    sealed = integrity.seal(METADATA_KEY, json.dumps(meta))
    pq.write_table(table.replace_schema_metadata(sealed), path, **integrity.PARQUET_WRITE)
    with pytest.raises(TraceError, match=r"no 'parity\.trace\.index' metadata"):
        TraceReader(path)
    altered = {**sealed, **integrity.seal(INDEX_KEY, json.dumps(index))}
    altered[INDEX_KEY] = json.dumps({**index, "steps": [0, 1, 3]})
    pq.write_table(table.replace_schema_metadata(altered), path, **integrity.PARQUET_WRITE)
    with pytest.raises(TraceError, match="does not match its sha256: the file is corrupt"):
        TraceReader(path)


def test_a_corrupted_page_is_refused(tmp_path):
    path = good(tmp_path)
    offset, size = TraceReader(path).byte_range(0)
    data = bytearray(path.read_bytes())
    data[offset + size - 3] ^= 0x01  # a value's bits
    path.write_bytes(bytes(data))
    r = TraceReader(path)  # the footer is intact
    with pytest.raises(TraceError, match=r"t\.parquet: corrupt: .*CRC checksum verification"):
        list(r.iter_steps())
    with pytest.raises(TraceError, match="corrupt"):
        r.read_step(2)


def test_recorded_steps_keep_first_and_last():
    assert recorded_steps(10, 4) == [0, 4, 8, 10]
    assert recorded_steps(3, 1) == [0, 1, 2, 3]


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


def test_writer_keeps_a_copy_of_arrays_it_does_not_own(tmp_path):
    layout = TraceLayout.of("f32", [("w", (4,))])
    base = np.arange(8, dtype=np.float32)
    with TraceWriter(tmp_path / "c.parquet", layout, base_meta(steps=1)) as w:
        w.write_step(0, None, {"w": base[:4]})  # a view: copied
        w.write_step(1, 1.0, {"w": base[::2]})  # not contiguous: copied
        base[:] = -1
    recs = list(TraceReader(tmp_path / "c.parquet").iter_steps())
    assert [r.tensors["w"].tolist() for r in recs] == [[0, 1, 2, 3], [0, 2, 4, 6]]


WRITE_IN_A_FRESH_PROCESS = """
import json
import sys
import numpy as np
from parity.trace.schema import TraceLayout
from parity.trace.writer import TraceWriter
meta = json.loads(sys.argv[2])
with TraceWriter(sys.argv[1], TraceLayout.of("f32", [("w", (4,))]), meta) as w:
    w.write_step(0, None, {"w": np.zeros(4, np.float32)})
    w.write_step(1, 1.0, {"w": np.ones(4, np.float32)})
print(sorted(m for m in sys.modules if m.partition(".")[0] == "pandas")[:3])
"""


def test_writing_a_trace_imports_no_pandas(tmp_path):
    """pa.array() imports pandas on its first call, 0.16-0.24 s of imports on the writer
    thread, holding the GIL, during a fresh job's first training steps; the writer wraps
    its arrays without it (docs/performance.md, "the first steps of a fresh job")."""
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            WRITE_IN_A_FRESH_PROCESS,
            str(tmp_path / "t.parquet"),
            json.dumps(base_meta(steps=1)),
        ],
        env={**os.environ, "PYTHONPATH": str(REPO / "scripts")},
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "[]"
    r = TraceReader(tmp_path / "t.parquet")
    assert [rec.tensors["w"].tolist() for rec in r.iter_steps()] == [[0.0] * 4, [1.0] * 4]


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


def test_a_non_finite_loss_alone_marks_the_run_diverged(tmp_path):
    steps = [{"w": [1.0]}, {"w": [2.0]}, {"w": [3.0]}]
    r = TraceReader(write_trace(tmp_path / "d.parquet", steps, losses=[None, 1.0, np.inf]))
    assert r.diverged_step == 2 and r.read_step(2).loss == np.inf


def test_the_divergence_test_is_a_float64_sum_in_both_dtypes(tmp_path):
    """float32 values at float32's largest are finite (their float64 sum cannot overflow);
    float64 values summing past 1e308 count as diverged, as documented."""
    big32 = [{"w": np.full(4, 3.4e38)}, {"w": np.full(4, -3.4e38)}, {"w": [1.0, np.nan, 0, 0]}]
    r = TraceReader(write_trace(tmp_path / "a.parquet", big32, "f32"))
    assert r.diverged_step == 2
    big64 = [{"w": [1.0, 1.0]}, {"w": [1e308, 1e308]}, {"w": [1.0, 1.0]}]
    assert TraceReader(write_trace(tmp_path / "b.parquet", big64, "f64")).diverged_step == 1


def test_arrays_handed_over_are_kept_as_they_are(tmp_path):
    layout = TraceLayout.of("f32", [("w", (2,))])
    buffer = bytearray(np.array([1, 2, 3, 4], np.float32).tobytes())
    view = np.frombuffer(buffer, np.float32)
    with TraceWriter(tmp_path / "h.parquet", layout, base_meta(steps=1)) as w:
        w.write_step(0, None, {"w": view[:2]}, handed_over=True)
        w.write_step(1, 1.0, {"w": view[2:]}, handed_over=True)
    recs = list(TraceReader(tmp_path / "h.parquet").iter_steps())
    assert [r.tensors["w"].tolist() for r in recs] == [[1, 2], [3, 4]]


def test_owned_arrays_are_kept_without_a_copy_and_views_are_copied(tmp_path):
    """What write_step keeps for the writer thread: an array that owns its memory (1-D or
    2-D, as the PyTorch runner's copies are) or one handed over is kept as it is, no second
    copy; a view the caller did not hand over is copied, so changing its base afterwards
    changes nothing in the trace; an F-ordered array is flattened into a copy of its own."""
    layout = TraceLayout.of("f32", [("a", (4,)), ("b", (2, 2))])
    owned_1d = np.arange(4, dtype=np.float32)
    owned_2d = np.arange(4, dtype=np.float32).reshape(2, 2).copy()
    base = np.arange(8, dtype=np.float32)
    fortran = np.asfortranarray(np.array([[1, 2], [3, 4]], np.float32))
    path = tmp_path / "k.parquet"
    with TraceWriter(path, layout, base_meta(steps=2)) as w:
        w.write_step(0, None, {"a": owned_1d, "b": owned_2d})
        kept = w._buffer[-1].tensors
        assert np.shares_memory(kept["a"], owned_1d) and np.shares_memory(kept["b"], owned_2d)
        w.write_step(1, 1.0, {"a": base[:4], "b": fortran})
        kept = w._buffer[-1].tensors
        assert not np.shares_memory(kept["a"], base)
        assert not np.shares_memory(kept["b"], fortran)
        w.write_step(2, 2.0, {"a": base[4:], "b": base[:4]}, handed_over=True)
        kept = w._buffer[-1].tensors
        assert np.shares_memory(kept["a"], base) and np.shares_memory(kept["b"], base)
        base[:4] = -1  # after step 1 was written: its copy stays as it was
    steps = list(TraceReader(path).iter_steps())
    assert steps[1].tensors["a"].tolist() == [0, 1, 2, 3]
    assert steps[1].tensors["b"].tolist() == [1, 2, 3, 4]  # flattened in C order


def test_a_run_that_failed_keeps_the_steps_before_its_failure_and_the_error(tmp_path):
    """A framework error during step 2 of 3 (a backward the framework cannot run): the
    trace holds steps 0 and 1, status failed, the step and the framework's message."""
    layout = TraceLayout.of("f32", [("w", (2,))])
    path = tmp_path / "t.parquet"
    with TraceWriter(path, layout, base_meta(steps=3)) as w:
        w.write_step(0, None, {"w": np.zeros(2, np.float32)})
        w.write_step(1, 0.5, {"w": np.ones(2, np.float32)})
        w.fail(2, "Backward is not supported for ConvTranspose1D")
    r = TraceReader(path)
    assert r.steps == [0, 1]
    assert r.meta["status"] == "failed" and r.meta["failed_step"] == 2
    assert r.meta["error"] == "Backward is not supported for ConvTranspose1D"


def test_a_failed_trace_without_its_step_or_error_is_refused(tmp_path):
    meta = dict(base_meta(steps=1), status="failed", diverged_step=None, failed_step=1)
    meta.update(schema_version=schema.SCHEMA_VERSION, dtype="f32", params=[["w", [2]]], extras=[])
    with pytest.raises(TraceError, match=r"failed_step .* and error"):
        schema.check_metadata(tmp_path / "t.parquet", meta)


def test_a_trace_that_did_not_fail_must_hold_every_step(tmp_path):
    layout = TraceLayout.of("f32", [("w", (2,))])
    w = TraceWriter(tmp_path / "t.parquet", layout, base_meta(steps=3))
    w.write_step(0, None, {"w": np.zeros(2, np.float32)})
    with pytest.raises(TraceError, match="trace ends before step 1"):
        w.close()


def forge(path, out, **changes):
    """A copy of trace ``path`` whose sealed metadata says ``changes`` (resealed: a seal
    proves only that nothing changed since it was made, not who made it)."""
    f = pq.ParquetFile(path)
    kv = dict(f.metadata.metadata)
    meta = json.loads(kv[METADATA_KEY])
    meta.update(changes)
    kv.update(integrity.seal(METADATA_KEY, json.dumps(meta, sort_keys=True)))
    table = f.read().replace_schema_metadata(kv)
    pq.write_table(table, out)
    return out


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"steps": 10**15}, "'steps' is 1000000000000000, beyond"),
        ({"record_every": 0}, "'record_every' is 0, not >= 1"),
        ({"dtype": "f16"}, "'dtype' is 'f16', not f32 or f64"),
        ({"params": [[f"p{i}", [1]] for i in range(2_000_000)]}, "lists 2000000 parameters"),
        ({"params": [["w", [10**6, 10**6]]]}, "claims 1000000000000 elements"),
        ({"params": [["w", "2"]]}, "'params'[0] is not [name, shape]"),
        ({"extras": ["grad:nothing"]}, "'extras' holds 'grad:nothing'"),
    ],
    ids=["steps", "record_every", "dtype", "two million params", "huge shape", "shape", "extra"],
)
def test_a_crafted_footer_is_refused_before_anything_is_built_from_it(tmp_path, changes, message):
    path = write_trace(tmp_path / "t.parquet", [{"w": np.zeros(2)}, {"w": np.ones(2)}])
    bad = forge(path, tmp_path / "bad.parquet", **changes)
    with pytest.raises(TraceError) as e:
        TraceReader(bad)
    assert message in str(e.value) and str(bad) in str(e.value)


def test_an_expectation_is_checked_before_the_layout_is_built(tmp_path):
    path = write_trace(tmp_path / "t.parquet", [{"w": np.zeros(2)}, {"w": np.ones(2)}])
    with pytest.raises(TraceError, match="metadata 'experiment' is 'hand', expected 'other'"):
        TraceReader(path, expect={"experiment": "other"})


@pytest.mark.skipif(
    not hasattr(os, "posix_fadvise") or not os.path.isdir("/proc/self/fd"),
    reason="posix_fadvise and /proc/self/fd are Linux's (elsewhere the writer gives no advice)",
)
def test_a_trace_of_many_row_groups_is_written_back_as_it_grows(tmp_path, monkeypatch):
    """After each row group the writer asks the kernel to write back and drop everything
    but that last row group (``Writeback``): never for a trace of one row group, each time
    up to where the row group before ended; the values read back are unchanged, and the
    descriptor it opened is closed with the trace."""
    from parity.core import fileio

    calls, sizes = [], []
    real_fadvise, real_advance = os.posix_fadvise, fileio.Writeback.advance
    monkeypatch.setattr(
        fileio.os,
        "posix_fadvise",
        lambda fd, off, n, how: calls.append((off, n, how)) or real_fadvise(fd, off, n, how),
    )

    def advance(self):
        sizes.append(os.fstat(self._fd).st_size)
        real_advance(self)

    monkeypatch.setattr(fileio.Writeback, "advance", advance)
    write_trace(tmp_path / "one.parquet", [{"w": np.arange(4.0)}, {"w": np.ones(4)}], "f64")
    assert len(sizes) == 1 and calls == []
    sizes.clear()
    monkeypatch.setattr(writer, "ROW_GROUP_BYTES", 64)
    rng = np.random.default_rng(5)
    steps = [{"w": rng.standard_normal(20)} for _ in range(4)]
    path = write_trace(tmp_path / "many.parquet", steps, "f64")
    assert len(sizes) == 4 and sizes == sorted(set(sizes))
    assert calls == [(0, sizes[k], os.POSIX_FADV_DONTNEED) for k in range(3)]
    got = [rec.tensors["w"].tobytes() for rec in TraceReader(path).iter_steps()]
    assert got == [s["w"].tobytes() for s in steps]
    assert not [fd for fd in os.listdir("/proc/self/fd") if str(tmp_path) in _link(fd)]


def _link(fd: str) -> str:
    """What this process's descriptor ``fd`` is open on ('' once it is closed)."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except FileNotFoundError:
        return ""


def test_writeback_is_advice_only(tmp_path, monkeypatch):
    """Where posix_fadvise is missing (macOS) or fails, a trace is written all the same."""
    from parity.core import fileio

    monkeypatch.setattr(writer, "ROW_GROUP_BYTES", 64)
    steps = [{"w": np.full(20, float(k))} for k in range(3)]

    def refuse(*a):
        raise OSError(22, "Invalid argument")

    monkeypatch.setattr(fileio.os, "posix_fadvise", refuse, raising=False)
    a = write_trace(tmp_path / "a.parquet", steps, "f64")
    monkeypatch.delattr(fileio.os, "posix_fadvise", raising=False)
    b = write_trace(tmp_path / "b.parquet", steps, "f64")
    for path in (a, b):
        got = [rec.tensors["w"].tolist() for rec in TraceReader(path).iter_steps()]
        assert got == [s["w"].tolist() for s in steps]
