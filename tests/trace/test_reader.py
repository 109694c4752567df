"""Trace reader: the sample trace, metadata, chunking, text/unknown columns, and writer round-trips."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np
import pytest

from agent.trace.model import TraceChunk, TraceMeta
from agent.trace.reader import TraceFormatError, open_trace

SAMPLE = Path(__file__).resolve().parents[2] / "docs" / "spec" / "sample-trace.csv"


def _concat(chunks: list[TraceChunk], name: str) -> np.ndarray:
    if name == "ts":
        return np.concatenate([c.ts for c in chunks])
    if name in ("stage", "job"):
        return np.concatenate([getattr(c, name) for c in chunks])
    return np.concatenate([c.numeric[name] for c in chunks])


def _write(tmp_path: Path, text: str, name: str = "trace.csv") -> Path:
    path = tmp_path / name
    path.write_bytes(text.encode("utf-8"))
    return path


def test_sample_trace_matches_csv_and_float(tmp_path: Path) -> None:
    """Every cell equals what csv + float() make of it (bit for bit), across chunk boundaries."""
    rows = [row for row in csv.reader(SAMPLE.open()) if row and not row[0].startswith("#")]
    header, data = rows[0], rows[1:]
    reader = open_trace(SAMPLE, chunk_rows=37)
    assert reader.columns == header
    assert reader.meta == TraceMeta(rack="r07", site="hall-b", crac_shares={"1": 0.25}, interval_s=1.0)
    chunks = list(reader)
    assert [len(c) for c in chunks] == [37] * 8 + [4]
    assert [c.first_line for c in chunks] == [6 + 37 * i for i in range(9)]
    for j, name in enumerate(header):
        got = _concat(chunks, name)
        if name in ("stage", "job"):
            assert got.tolist() == [row[j] for row in data]
        else:
            expected = np.array([float(row[j]) if row[j] else math.nan for row in data])
            assert np.array_equal(got, expected, equal_nan=True), name
    assert set(chunks[0].stage) <= {
        "idle",
        "data_load",
        "forward_backward",
        "grad_sync",
        "checkpoint",
        "eval",
    }


def test_chunk_size_does_not_change_the_data() -> None:
    whole = list(open_trace(SAMPLE, chunk_rows=10_000))
    assert len(whole) == 1
    for size in (1, 7, 299, 300):
        chunks = list(open_trace(SAMPLE, chunk_rows=size))
        assert sum(len(c) for c in chunks) == 300
        for name in whole[0].numeric:
            assert np.array_equal(_concat(chunks, name), whole[0].numeric[name], equal_nan=True)


def test_iterating_twice_reads_the_file_again() -> None:
    reader = open_trace(SAMPLE, chunk_rows=100)
    first = [c.ts.copy() for c in reader]
    second = [c.ts.copy() for c in reader]
    assert all(np.array_equal(a, b) for a, b in zip(first, second, strict=True))


def test_metadata_defaults_extras_and_comments(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "\ufeff# a plain comment\n\n# source = record v1\n# crac.east_2.share=0.5\nts,gpu.0.power_w\n1,2\n",
    )
    reader = open_trace(path)
    assert reader.meta.rack == "rack" and reader.meta.site == "site" and reader.meta.interval_s is None
    assert reader.meta.extra == {"source": "record v1"}
    assert reader.meta.crac_share("east_2") == 0.5 and reader.meta.crac_share("other") == 1.0
    assert reader.columns == ["ts", "gpu.0.power_w"]


def test_empty_cells_nan_text_and_unknown_columns(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "ts,stage,job,gpu.0.power_w,vendor.custom_x,work_rate\r\n"
        "1.5,idle,job-1,,nan,-0.25\r\n"
        "2,,job-1,NaN,1e3,\r\n"
        "3.25,my_stage_2,,700.5,.5,12345678901234567\r\n",
    )
    (chunk,) = list(open_trace(path))
    assert chunk.ts.tolist() == [1.5, 2.0, 3.25]
    assert chunk.stage.tolist() == ["idle", "", "my_stage_2"]
    assert chunk.job.tolist() == ["job-1", "job-1", ""]
    assert np.array_equal(chunk.numeric["gpu.0.power_w"], [np.nan, np.nan, 700.5], equal_nan=True)
    assert np.array_equal(chunk.numeric["vendor.custom_x"], [np.nan, 1000.0, 0.5], equal_nan=True)
    assert chunk.numeric["work_rate"][0] == -0.25 and chunk.numeric["work_rate"][2] == 12345678901234567.0
    assert set(chunk.numeric) == {"gpu.0.power_w", "vendor.custom_x", "work_rate"}
    assert chunk.numeric["gpu.0.power_w"].dtype == np.float64


def test_trace_without_stage_or_job_gets_empty_labels(tmp_path: Path) -> None:
    (chunk,) = list(open_trace(_write(tmp_path, "gpu.0.power_w,ts\n5,1\n6,2\n")))
    assert chunk.stage.tolist() == ["", ""] and chunk.job.tolist() == ["", ""]
    assert chunk.ts.tolist() == [1.0, 2.0] and chunk.numeric["gpu.0.power_w"].tolist() == [5.0, 6.0]


def test_header_only_trace_has_no_chunks(tmp_path: Path) -> None:
    reader = open_trace(_write(tmp_path, "# rack=x\nts,stage\n"))
    assert reader.meta.rack == "x" and list(reader) == []


def test_last_line_without_newline(tmp_path: Path) -> None:
    (chunk,) = list(open_trace(_write(tmp_path, "ts,a\n1,2\n3,4")))
    assert chunk.numeric["a"].tolist() == [2.0, 4.0]


def test_round_trip_through_the_writer(tmp_path: Path) -> None:
    writer_module = pytest.importorskip("agent.trace.writer")
    rng = np.random.default_rng(3)
    n = 1000
    numeric = {
        "work_rate": np.round(rng.uniform(0, 5000, n), 1),
        "gpu.0.power_w": np.round(rng.normal(600, 80, n), 1),
        "gpu.0.energy_j": np.round(1e9 + np.cumsum(rng.uniform(400, 700, n)), 3),
        "pdu.a.pf": np.round(rng.uniform(0.9, 1, n), 3),
        "odd.column": np.round(rng.normal(0, 1e-3, n), 4),
    }
    numeric["gpu.0.power_w"][::7] = np.nan
    numeric["pdu.a.pf"][rng.uniform(size=n) < 0.8] = np.nan
    stages = np.array(["idle", "forward_backward", "", "checkpoint"], dtype=object)[np.arange(n) % 4]
    chunk = TraceChunk(
        ts=1.7e9 + np.cumsum(rng.uniform(0.1, 2.0, n)).round(3),
        numeric=numeric,
        stage=stages,
        job=np.array(["j1"] * n, dtype=object),
    )
    meta = TraceMeta(rack="r1", site="s1", crac_shares={"c1": 0.3}, interval_s=1.0, extra={"k": "v"})
    path = tmp_path / "rt.csv"
    with writer_module.TraceWriter(path, meta, ["ts", "stage", "job", *numeric]) as writer:
        writer.write(chunk)
    reader = open_trace(path, chunk_rows=333)
    assert reader.meta == meta
    chunks = list(reader)
    assert np.array_equal(_concat(chunks, "ts"), chunk.ts)
    assert _concat(chunks, "stage").tolist() == stages.tolist()
    for name, values in numeric.items():
        assert np.array_equal(_concat(chunks, name), values, equal_nan=True), name


def test_error_message_names_file_and_line(tmp_path: Path) -> None:
    path = _write(tmp_path, "ts,a\n1,2\n2,x\n")
    with pytest.raises(TraceFormatError) as info:
        list(open_trace(path))
    assert str(info.value) == f"{path}: line 3: bad number 'x' in column a"
    assert (info.value.line, info.value.reason) == (3, "bad number 'x' in column a")


def test_missing_file_is_a_trace_format_error(tmp_path: Path) -> None:
    with pytest.raises(TraceFormatError, match="cannot read"):
        open_trace(tmp_path / "nope.csv")


def test_twin_trace_round_trips(tmp_path: Path) -> None:
    """What the twin simulates and the writer writes, the reader gives back (at the writer's resolution)."""
    twin = pytest.importorskip("agent.sim.twin")
    scenarios = pytest.importorskip("agent.sim.scenarios")
    writer_module = pytest.importorskip("agent.trace.writer")
    scenario = scenarios.make_scenario("steady", days=0.02, seed=3, gpus=8, hints=True)
    path = tmp_path / "trace.csv"
    written: list[TraceChunk] = []
    decimals = twin.decimals(scenario)
    with writer_module.TraceWriter(
        path, twin.trace_meta(scenario), twin.columns(scenario), decimals
    ) as writer:
        for chunk in twin.simulate(scenario):
            writer.write(chunk)
            written.append(chunk)
    reader = open_trace(path, chunk_rows=500)
    assert reader.meta == twin.trace_meta(scenario)
    chunks = list(reader)
    assert np.array_equal(_concat(chunks, "ts"), np.round(_concat(written, "ts"), 3))
    assert _concat(chunks, "stage").tolist() == [str(s) for s in _concat(written, "stage")]
    for name in reader.columns:
        if name in ("ts", "stage", "job"):
            continue
        original = (
            _concat(written, name)
            if name in written[0].numeric
            else np.full(len(_concat(chunks, "ts")), np.nan)
        )
        expected = np.round(original, writer_module.decimals_for(name, decimals))
        expected[~np.isfinite(expected)] = np.nan
        expected[expected == 0] = 0.0
        assert np.array_equal(_concat(chunks, name), expected, equal_nan=True), name


def test_position_counts_the_bytes_read_so_far_up_to_the_file_size() -> None:
    """Replay's progress (percent and time left) reads it after each chunk."""
    reader = open_trace(SAMPLE, chunk_rows=37)
    seen = [reader.position for _ in reader]
    assert seen == sorted(seen) and len(set(seen)) == len(seen)  # grows with every chunk
    assert seen[0] < SAMPLE.stat().st_size and seen[-1] == SAMPLE.stat().st_size


def test_skipped_columns_are_left_out_and_not_converted(tmp_path: Path) -> None:
    path = _write(tmp_path, "ts,a,gpu.0.temp_c,b\n1,2,hot,3\n2,4,5,x\n")
    skip = {"gpu.0.temp_c"}.__contains__
    with pytest.raises(TraceFormatError) as info:  # a bad number in a parsed column still fails
        list(open_trace(path, skip=skip))
    assert (info.value.line, info.value.reason) == (3, "bad number 'x' in column b")
    path = _write(tmp_path, "ts,a,gpu.0.temp_c,b\n1,2,hot,3\n2,4,5,6\n")
    (chunk,) = list(open_trace(path, skip=skip))
    assert sorted(chunk.numeric) == ["a", "b"] and chunk.ts.tolist() == [1.0, 2.0]
    assert chunk.numeric["b"].tolist() == [3.0, 6.0]
    with pytest.raises(TraceFormatError, match=r"line 2: bad number 'hot' in column gpu\.0\.temp_c"):
        list(open_trace(path))  # without skip every numeric column is checked
    path = _write(tmp_path, "ts,a,gpu.0.temp_c,b\n1,2,3,4\n2,4,6\n")
    with pytest.raises(TraceFormatError, match="line 3: wrong field count: expected 4 fields, got 3"):
        list(open_trace(path, skip=skip))  # the row's shape is still checked
