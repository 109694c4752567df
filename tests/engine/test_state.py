"""The state file: round trip, atomic write, corrupt and foreign files kept aside."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import synth
from conftest import run_engine

from agent.engine import Engine, rack_info
from agent.engine.state import StateError, pack, read_or_quarantine, unpack, write_atomic


def test_pack_round_trip_keeps_dtypes_and_shapes() -> None:
    arrays = {
        "a": np.arange(6, dtype=np.float64).reshape(2, 3),
        "names": np.array(["x", "yy"], dtype="<U8"),
        "flags": np.array([True, False]),
        "i": np.array([7], dtype=np.int64),
    }
    back = unpack(pack(arrays))
    assert list(back) == list(arrays)
    for k, v in arrays.items():
        assert back[k].dtype == v.dtype and back[k].shape == v.shape
        np.testing.assert_array_equal(back[k], v)


@pytest.mark.parametrize("damage", ["flip", "truncate", "magic", "empty"])
def test_damaged_bytes_are_refused(damage: str) -> None:
    blob = bytearray(pack({"a": np.arange(10.0)}))
    if damage == "flip":
        blob[20] ^= 0xFF
    elif damage == "truncate":
        blob = blob[:-9]
    elif damage == "magic":
        blob[:4] = b"XXXX"
    else:
        blob = bytearray()
    with pytest.raises(StateError):
        unpack(bytes(blob))


def test_corrupt_file_is_moved_aside_with_a_message(tmp_path: Path) -> None:
    path = tmp_path / "engine.state"
    path.write_bytes(b"RWST garbage that is not a state")
    blob, message = read_or_quarantine(path)
    assert blob is None and message is not None
    assert "corrupt" in message and "starting fresh" in message
    assert not path.exists()
    kept = list(tmp_path.glob("engine.state.bad-*"))
    assert len(kept) == 1 and kept[0].name in message


def test_missing_file_is_a_quiet_fresh_start(tmp_path: Path) -> None:
    assert read_or_quarantine(tmp_path / "nope.state") == (None, None)


def test_atomic_write_replaces_and_leaves_no_temp(tmp_path: Path) -> None:
    path = tmp_path / "s.state"
    write_atomic(path, b"one")
    write_atomic(path, b"two")
    assert path.read_bytes() == b"two"
    assert [p.name for p in tmp_path.iterdir()] == ["s.state"]


def test_engine_state_of_another_window_length_is_refused() -> None:
    from agent.config.model import EngineSection

    eng, _ = run_engine(synth.chunks(1 / 24, chunk_rows=600), finish=False)
    blob = eng.save_state()
    with pytest.raises(StateError, match="window"):
        Engine.load_state(blob, EngineSection(window_s=600.0), rack_info(synth.meta()))


def test_engine_state_of_another_version_is_refused() -> None:
    from agent.engine import persist

    eng = Engine(None, rack_info(synth.meta()))
    arrays = unpack(eng.save_state())
    arrays["engine_version"] = np.array([persist.ENGINE_STATE_VERSION + 1], dtype=np.int64)
    with pytest.raises(StateError, match="version"):
        Engine.load_state(pack(arrays), None, rack_info(synth.meta()))


def test_state_saved_before_the_outdoor_fields_still_loads() -> None:
    """Bin-sum fields are saved with their names; state from a build without two of them (the
    outdoor temperature) loads with them at zero and gives the same report afterwards."""
    from agent.engine.frames import PER_SLOT_BLOCKS
    from agent.engine.signals import N_FIELDS, F
    from agent.engine.stage_slots import N_SLOTS

    chunks = synth.chunks(3 / 24, chunk_rows=900)
    eng, _ = run_engine(chunks[: len(chunks) // 2], finish=False)
    arrays = unpack(eng.save_state())
    gone = [F["outdoor_s"], F["outdoor_ws"]]
    arrays["open_sums"] = np.delete(arrays["open_sums"], gone)
    arrays["wb_sums"] = np.delete(arrays["wb_sums"], gone, axis=1)
    arrays["bin_fields"] = np.delete(arrays["bin_fields"], gone)
    assert arrays["open_sums"].size == N_FIELDS - 2 + PER_SLOT_BLOCKS * N_SLOTS
    new = Engine.load_state(eng.save_state(), None, rack_info(synth.meta()))
    upgraded = Engine.load_state(pack(arrays), None, rack_info(synth.meta()))
    _, out_new = run_engine(chunks[len(chunks) // 2 :], new)
    _, out_upgraded = run_engine(chunks[len(chunks) // 2 :], upgraded)
    assert [r for r in out_new if r["type"] == "window"] == [r for r in out_upgraded if r["type"] == "window"]
    assert any(r["type"] == "window" for r in out_new)


def test_state_saved_before_each_stage_s_own_memory_traffic_still_loads() -> None:
    """A state from before the per-stage memory utilisation (three per-slot blocks in the open bin,
    no ``wb_stage_ms``/``wb_stage_mws``) loads with those at zero and goes on giving windows."""
    from agent.engine.frames import PER_SLOT_BLOCKS_BEFORE_MEMORY
    from agent.engine.signals import N_FIELDS
    from agent.engine.stage_slots import N_SLOTS

    chunks = synth.chunks(3 / 24, chunk_rows=900)
    eng, _ = run_engine(chunks[: len(chunks) // 2], finish=False)
    arrays = unpack(eng.save_state())
    before = N_FIELDS + PER_SLOT_BLOCKS_BEFORE_MEMORY * N_SLOTS
    arrays["open_sums"] = arrays["open_sums"][:before]
    del arrays["wb_stage_ms"], arrays["wb_stage_mws"]
    old = Engine.load_state(pack(arrays), None, rack_info(synth.meta()))
    assert not old.rows._open_sums[before:].any()
    _, out = run_engine(chunks[len(chunks) // 2 :], old)
    assert any(r["type"] == "window" and r.get("predicted_kwh") is not None for r in out)


def test_signal_names_outside_unicode_are_refused_not_crashed() -> None:
    """A damaged blob with a valid checksum can hold code points Python cannot represent; found by
    tests/trace/test_fuzz_inputs.py as a SystemError in str.split."""
    engine, _ = run_engine(synth.chunks(0.05, seed=2, chunk_rows=2000))
    arrays = unpack(engine.save_state())
    codes = arrays["signal_names"].view(np.uint32).copy()
    codes[4] = 0x1000037  # beyond U+10FFFF, in the first name
    arrays["signal_names"] = codes.view(arrays["signal_names"].dtype)
    with pytest.raises(StateError, match="not ASCII"):
        Engine.load_state(pack(arrays), None, rack_info(synth.meta()))


def test_a_dtype_that_is_not_a_plain_array_type_is_refused() -> None:
    """numpy parses a dtype string as a spec: a damaged '<f8' read as '08' raised SyntaxError from
    numpy's parser (found by tests/trace/test_fuzz_inputs.py)."""
    import struct
    import zlib

    blob = pack({"a": np.zeros(2)})
    body = bytearray(blob[:-4])
    at = bytes(body).index(b"<f8")
    body[at : at + 3] = b"008"
    damaged = bytes(body) + struct.pack("<I", zlib.crc32(bytes(body)))
    with pytest.raises(StateError, match="dtype"):
        unpack(damaged)


def test_a_version_2_state_upgrades_and_continues_like_this_builds_own() -> None:
    """``data/engine_v2.state.gz``: written by the build before the model class and the signal
    table (5 h of ``synth.chunks(10 / 24, chunk_rows=1800, seed=5)``, warm). Restored here, it
    continues exactly as this build's own state of the same rows does (up to float rounding of
    the IT solve, whose three always-zero temperature terms the upgrade drops, and of the IT model's
    regressors, which this build takes at the PDU samples' instants)."""
    import gzip

    from agent.engine import persist
    from agent.engine.signals import FEED_GPU, FIELDS

    blob = gzip.decompress((Path(__file__).parent / "data" / "engine_v2.state.gz").read_bytes())
    assert int(unpack(blob)["engine_version"][0]) == 2 < persist.ENGINE_STATE_VERSION
    chunks = synth.chunks(10 / 24, chunk_rows=1800, seed=5)
    first, _ = run_engine(chunks[: len(chunks) // 2], finish=False)
    # the same rows lost; a v2 state has no shadow regressions (shadow.py) nor job level
    # (model.JobLevel), so this build's own state is compared without them too (a hold in progress
    # at the save then starts its shadow afresh; the running job's level re-learns from the next job)
    new = ("shadow_", "job_level_")
    mine = {k: v for k, v in unpack(first.save_state()).items() if not k.startswith(new)}
    # nor the GPU load the PDU feeds' samples saw (feed_load.py): the bins' sums of it, the carry
    feed_fields = [i for i, name in enumerate(FIELDS) if name.startswith(FEED_GPU)]
    for key in ("open_sums", "wb_sums"):
        mine[key][..., feed_fields] = 0.0
    misc = persist._unblob(mine["misc"])
    misc["rows"].pop("feed_load")
    mine["misc"] = persist._blob(misc)
    # nor the residual levels' other memories (level_bank.py): its one level per column, at the default
    from agent.engine.level_bank import HALFLIVES_S
    from agent.engine.model import BIAS_HALFLIFE_S, IT_BIAS_HALFLIFE_S

    mine["bias_cool"] = mine.pop("level_cool")[:, HALFLIVES_S.index(BIAS_HALFLIFE_S)]
    mine["model_scalars"][8] = mine.pop("level_it")[0, HALFLIVES_S.index(IT_BIAS_HALFLIFE_S)]
    for key in ("level_cool_score", "level_cool_scored", "level_it_score", "level_it_scored"):
        mine.pop(key)
    own = Engine.load_state(pack(mine), None, rack_info(synth.meta()))
    upgraded = Engine.load_state(blob, None, rack_info(synth.meta()))
    assert upgraded.warm and upgraded.seq == own.seq
    _, out_own = run_engine(chunks[len(chunks) // 2 :], own)
    _, out_up = run_engine(chunks[len(chunks) // 2 :], upgraded)
    wins_own = [r for r in out_own if r["type"] == "window"]
    wins_up = [r for r in out_up if r["type"] == "window"]
    assert len(wins_own) == len(wins_up) >= 15
    for a, b in zip(wins_own, wins_up, strict=True):
        assert a["predicted_kwh"] is not None and a.keys() == b.keys()
        for key, value in a.items():
            # Measurements: exact (rel 1e-8: float rounding). What the model gives: the v2 build's IT model
            # learned on the GPUs' own moments, this build's on the load the PDU samples saw
            # (feed_load.py), so the two fits of the same rows differ by that sampling alone (≤ 0.2 %
            # here); 0.5 % is a third of the tightest accuracy target.
            rel = 1e-8 if "measured" in key or key in ("start", "end", "coverage") else 5e-3
            assert b[key] == (pytest.approx(value, rel=rel) if isinstance(value, float) else value), key


def test_state_saved_before_the_rate_curve_keeps_its_stage_levels() -> None:
    """A state whose stage-only IT model (and its shadow) has no rate-curve columns
    (``response.RATE_KNOTS``) loads: its levels and slopes are kept, the curve starts at zero."""
    from agent.engine.response import N_RATE_CURVE

    chunks = synth.chunks(3 / 24, chunk_rows=900)
    eng, _ = run_engine(chunks, finish=False)
    arrays = unpack(eng.save_state())
    for prefix in ("itstage", "shadow_it1"):
        keep = arrays[f"{prefix}_theta"].shape[1] - N_RATE_CURVE
        arrays[f"{prefix}_theta"] = arrays[f"{prefix}_theta"][:, :keep]
        arrays[f"{prefix}_r"] = arrays[f"{prefix}_r"][:, :keep]
        arrays[f"{prefix}_R"] = arrays[f"{prefix}_R"][:, :keep, :keep]
    old = Engine.load_state(pack(arrays), None, rack_info(synth.meta()))
    theta = old.model.it_stage.theta[0]
    assert np.array_equal(theta[:-N_RATE_CURVE], eng.model.it_stage.theta[0][:-N_RATE_CURVE])
    assert not theta[-N_RATE_CURVE:].any() and theta[:-N_RATE_CURVE].any()
    assert old.model.it_stage.R.shape == eng.model.it_stage.R.shape


def test_a_version_2_state_of_a_rack_that_never_saw_a_gpu_upgrades() -> None:
    """A v2 build saved "no GPU sample yet" as -inf in its own array; a PDU-only rack's v2 state
    must still load (the range check refused it, and the rack restarted cold)."""
    import gzip

    a = unpack(gzip.decompress((Path(__file__).parent / "data" / "engine_v2.state.gz").read_bytes()))
    a["gpu_seen_ts"] = np.array([-np.inf])
    upgraded = Engine.load_state(pack(a), None, rack_info(synth.meta()))
    assert upgraded.model.gpu_seen_ts == -np.inf and upgraded.warm

