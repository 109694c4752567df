"""Fuzz (hypothesis, bounded) of two inputs an operator hands the agent: a trace file (read, then
run through the engine as ``replay`` does) and a state file (``Engine.load_state``, then run).

Each case ends in a listed error (``TraceFormatError`` naming a line, ``StateError`` saying what
does not fit) or in a clean run: never another exception (a traceback for the operator), never
more than ``CASE_S`` seconds or ``CASE_BYTES`` of memory (issue 18: one timestamp in 2000 took a
replay to 23 GB). Mutations aim at what broke before: timestamps (0, 2000, +1 year, duplicated,
reordered rows), cell bytes, and state arrays rewritten with a valid checksum, so the loader's own
checks are reached and not only the CRC.
"""

from __future__ import annotations

import math
import struct
import tempfile
import time
import tracemalloc
import zlib
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.engine import Engine, persist, rack_info
from agent.engine.state import StateError, pack, unpack
from agent.trace.model import TraceChunk, TraceMeta
from agent.trace.reader import TraceFormatError, open_trace

CASE_S = 2.0
CASE_BYTES = 200 * 1024 * 1024
SAMPLE = (Path(__file__).resolve().parents[2] / "docs" / "spec" / "sample-trace.csv").read_bytes()
SHORT = b"\n".join(SAMPLE.split(b"\n")[:65]) + b"\n"  # metadata, header, 60 rows
TS_CELLS = [b"0", b"1", b"946684800", b"960000000", b"1748801412", b"1e10", b"-5", b"1e300", b"99999999999"]
FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _bounded(run: object) -> None:
    """Run ``run()`` and hold it to the per-case time and memory limits. Time is this process's CPU
    time (tracemalloc's own cost included), so other jobs on a busy CI machine do not count."""
    tracemalloc.start()
    started = time.process_time()
    try:
        run()  # type: ignore[operator]
    finally:
        elapsed = time.process_time() - started
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert elapsed < CASE_S, f"case took {elapsed:.2f} s"
    assert peak < CASE_BYTES, f"case peaked at {peak / 2**20:.0f} MiB"


def _mutate_trace(data: bytes, draw: st.DataObject) -> bytes:
    lines = data.split(b"\n")
    head = next(i for i, line in enumerate(lines) if line.startswith(b"ts,")) + 1
    for _ in range(draw.draw(st.integers(1, 4))):
        kind = draw.draw(st.sampled_from(["ts", "shift", "duplicate", "swap", "bytes"]))
        i = draw.draw(st.integers(head, len(lines) - 2))
        if kind == "ts":  # one row's ts replaced: a clock never set, a garbled cell, a jump
            cells = lines[i].split(b",")
            cells[0] = draw.draw(st.sampled_from(TS_CELLS))
            lines[i] = b",".join(cells)
        elif kind == "shift":  # every row from i on moved (a clock step), forward or back
            by = draw.draw(st.sampled_from([365 * 86400.0, 30 * 86400.0, 7200.0, -7200.0, -365 * 86400.0]))
            for j in range(i, len(lines) - 1):
                cells = lines[j].split(b",")
                try:
                    cells[0] = repr(float(cells[0]) + by).encode()
                except ValueError:
                    continue
                lines[j] = b",".join(cells)
        elif kind == "duplicate":
            lines.insert(i, lines[i])
        elif kind == "swap":
            lines[i], lines[i + 1] = lines[i + 1], lines[i]
        else:
            at = draw.draw(st.integers(0, len(lines[i])))
            piece = draw.draw(
                st.one_of(
                    st.sampled_from([b",", b"", b"nan", b"\xff", b"-", b"1e999"]), st.binary(max_size=3)
                )
            )
            lines[i] = lines[i][:at] + piece + lines[i][at + draw.draw(st.integers(0, 3)) :]
    return b"\n".join(lines)


def _replay(raw: bytes, strict: bool) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "trace.csv"
        path.write_bytes(raw)
        try:
            reader = open_trace(path, chunk_rows=32, strict=strict)
            engine = Engine(None, rack_info(reader.meta))
            for chunk in reader:
                engine.process(chunk)
        except TraceFormatError as exc:
            assert exc.line >= 0 and exc.reason
            return
        engine.finish()


@pytest.mark.slow
@FUZZ
@given(data=st.data(), strict=st.booleans())
def test_a_mutated_trace_replays_or_names_its_line_in_bounded_time_and_memory(
    data: st.DataObject, strict: bool
) -> None:
    raw = _mutate_trace(SHORT, data)
    _bounded(lambda: _replay(raw, strict))


def _saved_state() -> bytes:
    meta = TraceMeta(crac_shares={"1": 0.25})
    engine = Engine(None, rack_info(meta))
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "trace.csv"
        path.write_bytes(SAMPLE)
        for chunk in open_trace(path):
            engine.process(chunk)
    return engine.save_state()


STATE = _saved_state()
NAMES = sorted(unpack(STATE))
SCALAR_NAMES = [n for n in NAMES if n.endswith("_scalars")]  # each part's scalars (state v3)
ODD_VALUES = [math.nan, math.inf, -math.inf, 0.0, -1.0, 1e300, 1e18, 2**63, 946684800.0, 1.7e9 + 365 * 86400]


def _with_crc(body: bytes) -> bytes:
    return body + struct.pack("<I", zlib.crc32(body))


JSON_PARTS = ("misc", "stages", "drift")  # structured parts stored as JSON in uint8 arrays
ODD_JSON: list[object] = [None, -1, 1e308, "x", [], {}, True, 2**70, -1e18]


def _json_paths(obj: object, prefix: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    out = [prefix]
    if isinstance(obj, dict):
        for key, value in obj.items():
            out += _json_paths(value, (*prefix, key))
    elif isinstance(obj, list):
        for i, value in enumerate(obj[:3]):
            out += _json_paths(value, (*prefix, i))
    return out


def _mutate_json(arrays: dict[str, np.ndarray], draw: st.DataObject) -> None:
    name = draw.draw(st.sampled_from(JSON_PARTS))
    tree = persist._unblob(arrays[name])
    path = draw.draw(st.sampled_from(_json_paths(tree)))
    value = draw.draw(st.sampled_from(ODD_JSON))
    if not path:
        tree = value
    else:
        node = tree
        for key in path[:-1]:
            node = node[key]  # type: ignore[index]
        node[path[-1]] = value  # type: ignore[index]
    arrays[name] = persist._blob(tree)


def _mutate_state(draw: st.DataObject) -> bytes:
    kinds = ["scalar", "json", "array_values", "array_shape", "drop_array", "bytes", "truncate"]
    kind = draw.draw(st.sampled_from(kinds))
    if kind in ("bytes", "truncate"):  # the framing itself, checksum made valid again
        body = bytearray(STATE[:-4])
        if kind == "truncate":
            body = body[: draw.draw(st.integers(0, len(body)))]
        else:
            for _ in range(draw.draw(st.integers(1, 8))):
                body[draw.draw(st.integers(0, len(body) - 1))] = draw.draw(st.integers(0, 255))
        return _with_crc(bytes(body))
    arrays = unpack(STATE)
    if kind == "json":
        _mutate_json(arrays, draw)
        return pack(arrays)
    name = draw.draw(st.sampled_from(SCALAR_NAMES if kind == "scalar" else NAMES))
    arr = arrays[name]
    if kind == "drop_array":
        del arrays[name]
    elif kind == "array_shape":
        arrays[name] = np.zeros(
            draw.draw(st.sampled_from([(0,), (1,), (3, 2), (arr.size + 1,)])), dtype=arr.dtype
        )
    elif arr.size:  # "scalar" and "array_values": one value replaced
        flat = arr.copy().reshape(-1)
        i = draw.draw(st.integers(0, flat.size - 1))
        if flat.dtype.kind == "f":
            flat[i] = draw.draw(st.sampled_from(ODD_VALUES))
        elif flat.dtype.kind in "iu":
            flat[i] = draw.draw(st.sampled_from([0, -1, 1, 2**31, 2**62])) if flat.dtype.kind == "i" else 255
        elif flat.dtype.kind == "U":
            flat[i] = draw.draw(st.sampled_from(["", "x" * 64, "Bad Label", "gpu.0.power_w", "é"]))
        elif flat.dtype.kind == "b":
            flat[i] = not flat[i]
        arrays[name] = flat.reshape(arr.shape)
    return pack(arrays)


SAMPLE_END_TS = 1717265711.0
RESUME_AFTER_S = [1.0, 3600.0, 30 * 86400.0]  # right after the state, after a gap, a month later


def _next_rows(after_s: float) -> TraceChunk:
    n = 400
    ts = SAMPLE_END_TS + after_s + np.arange(n, dtype=float)
    blank = np.full(n, "", dtype=object)
    numeric = {"gpu.0.power_w": np.full(n, 500.0), "pdu.a.power_w": np.full(n, 1200.0)}
    return TraceChunk(ts, numeric, np.full(n, "idle", dtype=object), blank)


def _restore_and_run(blob: bytes, after_s: float = 1.0) -> bool:
    """True when the state was accepted (and the engine then ran), False when it was refused."""
    try:
        engine = Engine.load_state(blob, None, rack_info(TraceMeta(crac_shares={"1": 0.25})))
    except StateError as exc:
        assert str(exc)
        return False
    engine.process(_next_rows(after_s))
    engine.finish()
    engine.save_state()
    return True


@pytest.mark.slow
@FUZZ
@given(data=st.data(), after_s=st.sampled_from(RESUME_AFTER_S))
def test_a_mutated_state_loads_and_runs_or_is_refused_in_bounded_time_and_memory(
    data: st.DataObject, after_s: float
) -> None:
    blob = _mutate_state(data)
    _bounded(lambda: _restore_and_run(blob, after_s))


@pytest.mark.parametrize("after_s", RESUME_AFTER_S)
def test_the_unmutated_state_restores_and_runs(after_s: float) -> None:
    assert _restore_and_run(STATE, after_s)
