"""agent/trace/writer.py: the spec's layout, empty cells, compact numbers, and clear refusals."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.sim import columns, decimals, make_scenario, simulate, trace_meta
from agent.trace.model import TraceChunk, TraceMeta
from agent.trace.reader import open_trace
from agent.trace.writer import TraceWriteError, TraceWriter


def _chunk(ts: list[float], **numeric: list[float]) -> TraceChunk:
    n = len(ts)
    return TraceChunk(
        ts=np.asarray(ts, dtype=float),
        numeric={k: np.asarray(v, dtype=float) for k, v in numeric.items()},
        stage=np.array(["forward_backward"] * n, dtype=object),
        job=np.array(["j1"] * n, dtype=object),
    )


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def test_layout_empty_cells_and_compact_numbers(tmp_path: Path) -> None:
    meta = TraceMeta(rack="r1", site="s1", crac_shares={"1": 0.25}, interval_s=1.0, extra={"seed": "7"})
    cols = ["ts", "stage", "job", "gpu.0.power_w", "pdu.a.energy_kwh", "crac.1.fan_pct", "extra.thing"]
    path = tmp_path / "t.csv"
    with TraceWriter(path, meta, cols) as writer:
        writer.write(
            _chunk(
                [1717265412, 1717265412.25, 1717265413],
                **{
                    "gpu.0.power_w": [700.0, np.nan, 64.26],
                    "pdu.a.energy_kwh": [36644.1864, np.inf, -0.0001],
                    "crac.1.fan_pct": [np.nan, np.nan, -0.0],
                },
            )
        )
    lines = _lines(path)
    assert lines[:5] == ["# rack=r1", "# site=s1", "# crac.1.share=0.25", "# interval_s=1", "# seed=7"]
    assert lines[5] == ",".join(cols)
    assert lines[6:] == [
        "1717265412,forward_backward,j1,700,36644.186,,",
        "1717265412.25,forward_backward,j1,,,,",  # NaN and inf are "not sampled", never zero
        "1717265413,forward_backward,j1,64.3,0,0,",  # no "-0"; the unknown column stays empty
    ]


def test_chunks_append_and_ts_must_increase(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    with TraceWriter(path, TraceMeta(), ["ts", "gpu.0.power_w"]) as writer:
        writer.write(_chunk([1.0, 2.0], **{"gpu.0.power_w": [1.0, 2.0]}))
        writer.write(_chunk([3.0], **{"gpu.0.power_w": [3.0]}))
        with pytest.raises(TraceWriteError, match="strictly increasing at data row 5"):
            writer.write(_chunk([4.0, 4.0], **{"gpu.0.power_w": [1.0, 2.0]}))
        with pytest.raises(TraceWriteError, match="strictly increasing at data row 4"):
            writer.write(_chunk([3.0], **{"gpu.0.power_w": [1.0]}))
        assert writer.rows_written == 3
    assert _lines(path)[-1] == "3,3"


def test_refusals_name_what_is_wrong(tmp_path: Path) -> None:
    with pytest.raises(TraceWriteError, match="first column must be 'ts'"):
        TraceWriter(tmp_path / "a.csv", TraceMeta(), ["stage", "ts"])
    with pytest.raises(TraceWriteError, match="duplicate"):
        TraceWriter(tmp_path / "b.csv", TraceMeta(), ["ts", "x", "x"])
    with TraceWriter(tmp_path / "c.csv", TraceMeta(), ["ts", "stage", "job"]) as writer:
        bad = _chunk([1.0])
        bad.job = np.array(["a,b"], dtype=object)
        with pytest.raises(TraceWriteError, match="job label 'a,b'"):
            writer.write(bad)
        short = _chunk([1.0, 2.0], **{"gpu.0.power_w": [1.0]})
        with pytest.raises(TraceWriteError, match=r"gpu\.0\.power_w"):
            TraceWriter(tmp_path / "d.csv", TraceMeta(), ["ts", "gpu.0.power_w"]).write(short)
    writer = TraceWriter(tmp_path / "e.csv", TraceMeta(), ["ts"])
    writer.close()
    with pytest.raises(TraceWriteError, match="after close"):
        writer.write(_chunk([1.0]))


def test_labels_containing_nan_survive(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    chunk = _chunk([1.0, 2.0], **{"gpu.0.power_w": [np.nan, 5.0]})
    chunk.job = np.array(["nanogpt-1", "nanogpt-1"], dtype=object)
    with TraceWriter(path, TraceMeta(), ["ts", "stage", "job", "gpu.0.power_w"]) as writer:
        writer.write(chunk)
    assert _lines(path)[-2:] == ["1,forward_backward,nanogpt-1,", "2,forward_backward,nanogpt-1,5"]


def _write_sim(tmp_path: Path) -> tuple[Path, list[TraceChunk]]:
    sc = make_scenario("fault_gpu_driver", days=0.05, seed=21, fault_start_h=0.5)
    chunks = list(simulate(sc))
    path = tmp_path / "trace.csv"
    with TraceWriter(path, trace_meta(sc), columns(sc), decimals(sc)) as writer:
        for chunk in chunks:
            writer.write(chunk)
    return path, chunks


def test_simulated_trace_round_trips_through_csv(tmp_path: Path) -> None:
    path, chunks = _write_sim(tmp_path)
    with path.open(encoding="utf-8") as f:
        rows = list(csv.reader(line for line in f if not line.startswith("#")))
    header, data = rows[0], rows[1:]
    assert len(data) == sum(len(c) for c in chunks)
    for name in ("gpu.0.power_w", "gpu.0.energy_j", "pdu.b.energy_kwh", "crac.1.cooling_w", "work_rate"):
        i = header.index(name)
        read = np.array([float(r[i]) if r[i] else np.nan for r in data])
        np.testing.assert_array_equal(read, np.concatenate([c.numeric[name] for c in chunks]))
    stage = header.index("stage")
    assert [r[stage] for r in data] == np.concatenate([c.stage for c in chunks]).tolist()


def test_simulated_trace_round_trips_through_the_reader(tmp_path: Path) -> None:
    path, chunks = _write_sim(tmp_path)
    read = _read_all(path)
    assert read.meta.crac_share("1") == 0.25 and read.meta.rack == "r07"
    np.testing.assert_array_equal(read.ts, np.concatenate([c.ts for c in chunks]))
    for name in chunks[0].numeric:
        np.testing.assert_array_equal(read.numeric[name], np.concatenate([c.numeric[name] for c in chunks]))
    assert read.stage.tolist() == np.concatenate([c.stage for c in chunks]).tolist()
    assert read.job.tolist() == np.concatenate([c.job for c in chunks]).tolist()


class _ReadBack:
    def __init__(self, meta: TraceMeta, chunks: list[TraceChunk]) -> None:
        self.meta = meta
        self.ts = np.concatenate([c.ts for c in chunks])
        self.numeric = {k: np.concatenate([c.numeric[k] for c in chunks]) for k in chunks[0].numeric}
        self.stage = np.concatenate([c.stage for c in chunks])
        self.job = np.concatenate([c.job for c in chunks])


def _read_all(path: Path) -> _ReadBack:
    reader = open_trace(path)
    return _ReadBack(reader.meta, list(reader))


_ANY_FLOAT = st.floats(allow_nan=True, allow_infinity=True, width=64)
_METER_FLOAT = st.one_of(
    st.floats(min_value=-1e7, max_value=1e7), st.just(float("nan")), st.integers(-99, 99).map(float)
)


@settings(max_examples=120, deadline=None)
@given(
    values=st.lists(st.one_of(_ANY_FLOAT, _METER_FLOAT, _METER_FLOAT), min_size=1, max_size=40),
    places=st.integers(min_value=-2, max_value=4),
)
def test_any_float_is_written_as_its_rounded_value_or_empty(values: list[float], places: int) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "t.csv"
        ts = [float(i) for i in range(len(values))]
        with TraceWriter(path, TraceMeta(), ["ts", "x.value"], {"x.value": places}) as writer:
            writer.write(_chunk(ts, **{"x.value": values}))
        cells = [line.split(",")[1] for line in _lines(path)[3:]]
    assert len(cells) == len(values)
    for cell, value in zip(cells, values, strict=True):
        with np.errstate(all="ignore"):
            expected = float(np.round(value, places))
        if not np.isfinite(expected):
            assert cell == ""
        else:
            assert "nan" not in cell and "inf" not in cell and cell != "-0"
            assert float(cell) == pytest.approx(expected, rel=1e-14, abs=0.0)
            if abs(expected) * 10.0 ** max(places, 0) < 1e14:  # the compact fixed-point form
                fixed = f"{expected:.{max(places, 0)}f}"
                fixed = fixed.rstrip("0").rstrip(".") if "." in fixed else fixed
                assert cell == ("0" if fixed == "-0" else fixed)


@pytest.mark.slow
def test_sim_command_output_round_trips_through_the_reader(tmp_path: Path) -> None:
    """Half a day of the mixed scenario (faults, outages, glitches, driver reset) via ``rackwatt sim``."""
    from agent.cli import main

    assert (
        main(
            ["sim", "--scenario", "mixed", "--days", "0.5", "--seed", "31", "--out", str(tmp_path), "--quiet"]
        )
        == 0
    )
    expected = _ReadBack(
        trace_meta(make_scenario("mixed", days=0.5, seed=31)),
        list(simulate(make_scenario("mixed", days=0.5, seed=31))),
    )
    read = _read_all(tmp_path / "trace.csv")
    assert read.meta == expected.meta
    np.testing.assert_array_equal(read.ts, expected.ts)
    assert set(read.numeric) == set(expected.numeric)
    for name, values in expected.numeric.items():
        np.testing.assert_array_equal(read.numeric[name], values, err_msg=name)
    assert read.stage.tolist() == expected.stage.tolist() and read.job.tolist() == expected.job.tolist()
