"""Profiles as data and the pure decoding step (no network)."""

from __future__ import annotations

from pathlib import Path

import pytest

from drivers.snmp_pdu.plan import Row, build_plan, decode, prune
from drivers.snmp_pdu.profile import (
    CANONICAL_SIGNALS,
    ProfileError,
    builtin_profiles,
    load_profile_file,
    match_sys_object_id,
    parse_profile,
)

APC_ROWS = {"device": [Row((1,), {"module": 1})], "phase": [Row((1,), {"module": 1, "number": 1})],
            "legacy_load": []}


def test_builtin_profiles_load_and_every_quirk_names_its_source() -> None:
    profiles = builtin_profiles()
    wanted = {"apc_rpdu2", "raritan_pdu2", "sentry4", "eaton_epdu", "vertiv_v5", "entity_sensor", "apc_epdu",
              "apc_masterswitch", "liebert_pdu", "hpe_pdu2", "hp_pdu_mm", "chatsworth_econnect", "panduit_g5",
              "schleifenbauer", "sentry3", "raritan_px1", "rittal_cmc3_pdu", "e3meter", "tripplite_pdu"}
    assert wanted <= set(profiles)
    for profile in profiles.values():
        for measure in profile.measures:
            assert measure.source, f"{profile.name}: {measure.signal} has no source"
            assert measure.signal in CANONICAL_SIGNALS


@pytest.mark.parametrize(("oid", "name"), [
    ((1, 3, 6, 1, 4, 1, 318, 1, 3, 4, 6), "apc_rpdu2"),
    ((1, 3, 6, 1, 4, 1, 13742, 6), "raritan_pdu2"),
    ((1, 3, 6, 1, 4, 1, 21239, 42, 1, 53), "vertiv_v5"),
    ((1, 3, 6, 1, 4, 1, 534, 6, 6, 7), "eaton_epdu"),
])
def test_sys_object_id_picks_the_profile(oid: tuple[int, ...], name: str) -> None:
    found = match_sys_object_id(oid)
    assert found is not None and found[0].name == name


def test_the_most_specific_prefix_wins_whatever_the_file_order() -> None:
    easy = (1, 3, 6, 1, 4, 1, 318, 1, 3, 4, 9)
    found = match_sys_object_id(easy)
    assert found is not None and found[0].name == "apc_epdu" and found[1] == easy
    found = match_sys_object_id((1, 3, 6, 1, 4, 1, 318, 1, 3, 4, 6))
    assert found is not None and found[0].name == "apc_rpdu2"


def test_a_profile_can_exclude_a_family_under_its_prefix(tmp_path: Path) -> None:
    for name, extra in (("wide", 'exclude_sys_object_ids = ["1.3.6.1.4.1.9.7"]'), ("other", "")):
        prefix = "1.3.6.1.4.1.9" if name == "wide" else "1.3.6.1.4.1.9.7.1"
        (tmp_path / f"{name}.toml").write_text(
            f'name = "{name}"\nsys_object_ids = ["{prefix}"]\n{extra}\n'
            '[[measures]]\nsignal = "power_w"\noid = "1.3.6.1.4.1.9.1.0"\nsource = "test"\n')
    assert match_sys_object_id((1, 3, 6, 1, 4, 1, 9, 5), tmp_path)[0].name == "wide"  # type: ignore[index]
    assert match_sys_object_id((1, 3, 6, 1, 4, 1, 9, 7, 2), tmp_path) is None  # excluded, and no other
    assert match_sys_object_id((1, 3, 6, 1, 4, 1, 9, 7, 1, 3), tmp_path)[0].name == "other"  # type: ignore[index]


def test_rows_found_by_name_and_scaled_by_a_signed_scale_column() -> None:
    profile = builtin_profiles()["rittal_cmc3_pdu"]  # RITTAL-CMC-III: -10 divides by 10, 1 multiplies
    rows = {"var": [Row((2, 12), {"walk": "Total.Power.Active.Value", "scale": 1}),
                    Row((2, 20), {"walk": "Total.Energy.Active.Value", "scale": -10}),
                    Row((2, 36), {"walk": "Phase L1.Current.Value", "scale": -100}),
                    Row((2, 40), {"walk": "Phase L1.Current.Value"})]}  # no scale read: unusable
    plan = build_plan(profile, rows)
    assert sorted(i.oid[-1] for i in plan.items) == [12, 20, 36]
    decoded = decode(plan, [{12: 2742, 20: 26418, 36: 473}[i.oid[-1]] for i in plan.items])
    assert decoded.totals == {"power_w": 2742.0, "energy_kwh": 2641.8, "current_a": 4.73}


def test_switched_only_profiles_need_a_probe() -> None:
    with pytest.raises(ProfileError, match="metered = false needs probe"):
        parse_profile({"metered": False}, "mine")
    assert builtin_profiles()["apc_masterswitch"].measures == ()


def test_unknown_sys_object_id_matches_nothing() -> None:
    assert match_sys_object_id((1, 3, 6, 1, 4, 1, 318, 1, 3, 14, 23)) is None  # an InRow cooler, not a PDU


@pytest.mark.parametrize(("data", "message"), [
    ({"measures": [{"signal": "power_w", "oid": "1.3.x"}]}, "measures[0].oid: '1.3.x' is not a numeric OID"),
    ({"measures": [{"signal": "power_w", "oid": "1.3.6", "table": "t"}]},
     "measures[0].table: 't' is not declared"),
    ({"measures": [{"signal": "power_w", "oid": "1.3.6", "scael": 10}]},
     "measures[0]: unknown key(s) ['scael']"),
    ({"measures": [{"signal": "power_w", "oid": "1.3.6", "scale": 0}]}, "measures[0].scale: must not be 0"),
    ({"measures": []}, "needs at least one [[measures]] entry"),
    ({"tables": {"t": {"label": "x"}}, "measures": [{"signal": "pf", "oid": "1.3"}]},
     "tables.t.walk: required"),
])
def test_bad_profile_data_names_the_key(data: dict[str, object], message: str) -> None:
    with pytest.raises(ProfileError) as err:
        parse_profile(data, "mine")
    assert message in str(err.value)


def test_bad_toml_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "broken.toml"
    path.write_text("name = \n")
    with pytest.raises(ProfileError, match=r"broken\.toml: not valid TOML"):
        load_profile_file(path)


def test_scaling_is_exact_to_the_device_resolution() -> None:
    plan = build_plan(builtin_profiles()["apc_rpdu2"], APC_ROWS)
    values = {"power_w": 114, "energy_kwh": 35128, "pf": 96, "voltage_v": 242, "current_a": 49}
    raw = [values[item.measure.signal] if item.measure.priority == 0 else None for item in plan.items]
    totals = decode(plan, raw).totals
    assert totals == {"power_w": 1140.0, "energy_kwh": 3512.8, "pf": 0.96, "voltage_v": 242.0,
                      "current_a": 4.9}


def test_sentinels_fall_back_by_priority_then_prune() -> None:
    plan = build_plan(builtin_profiles()["apc_rpdu2"], APC_ROWS)
    by_oid = {(1, 3, 6, 1, 4, 1, 318, 1, 1, 26, 4, 3, 1, 5, 1): -1,      # device power: not supported
              (1, 3, 6, 1, 4, 1, 318, 1, 1, 26, 6, 3, 1, 7, 1): 51,      # phase power: 0.51 kW
              (1, 3, 6, 1, 4, 1, 318, 1, 1, 12, 1, 16, 0): 480}         # legacy estimate
    decoded = decode(plan, [by_oid.get(item.oid) for item in plan.items])
    assert decoded.totals["power_w"] == 510.0 and "power_w" not in decoded.estimated
    assert decoded.levels["power_w"] == 1
    assert "energy_kwh" not in decoded.totals  # NoSuchInstance (None) → missing, never 0
    pruned = prune(plan, decoded.levels)
    assert [i.measure.priority for i in pruned.items if i.measure.signal == "power_w"] == [1]
    assert len(pruned.items) < len(plan.items)


def test_a_sum_with_a_missing_row_is_missing_but_a_mean_is_not() -> None:
    profile = builtin_profiles()["sentry4"]
    rows = {"cord": [Row((1, 1)), Row((2, 1))], "line": [], "phase": [Row((1, 1, 1)), Row((2, 1, 1))]}
    plan = build_plan(profile, rows)
    raw = []
    for item in plan.items:
        unit = item.oid[-3] if item.measure.table == "phase" else item.oid[-2]
        raw.append(-1 if unit == 2 else 2000)
    decoded = decode(plan, raw)
    assert "power_w" not in decoded.totals  # unit 2 reads -1: no feed total from unit 1 alone
    assert decoded.totals["voltage_v"] == 200.0  # the mean of the phases that answered
    assert decoded.per_row["unit1.cord1.power_w"] == 2000.0


def test_raritan_digits_come_from_the_device() -> None:
    profile = builtin_profiles()["raritan_pdu2"]
    rows = {"inlet": [Row((1, 1, 1), {"digits": 3}), Row((1, 1, 5), {"digits": 1}), Row((1, 1, 8), {})]}
    plan = build_plan(profile, rows)
    assert [i.oid[-1] for i in plan.items] == [5, 1]  # energy row without digits is unusable, not guessed
    decoded = decode(plan, [16651, 7467])
    assert decoded.totals == {"power_w": 1665.1, "current_a": 7.467}


def test_sample_configuration_loads(tmp_path: Path) -> None:
    from agent.config.loader import load_config

    sample = Path(__file__).resolve().parents[3] / "drivers" / "snmp_pdu" / "sample.toml"
    text = sample.read_text().replace("/etc/rackwatt/", f"{tmp_path}/")
    for name in ("pdu-a.community", "pdu-b.auth", "pdu-b.priv", "pdu-c.community"):
        (tmp_path / name).write_text("secret-value\n")
        (tmp_path / name).chmod(0o600)
    (tmp_path / "agent.toml").write_text(text)
    config = load_config(tmp_path / "agent.toml")
    assert [(p.id, p.version, p.profile) for p in config.pdus] == [
        ("a", "2c", "auto"), ("b", "3", "raritan_pdu2"), ("c", "2c", "generic")]
    assert len(config.pdus[2].oids) == 3


@pytest.mark.parametrize(("overrides", "message"), [
    ({"profile": "nope"},
     "pdu 'a' (10.0.0.1:161): unknown SNMP PDU profile 'nope'; known: apc_epdu, apc_masterswitch,"),
    ({"version": "3", "user": "u", "auth_protocol": "SHA1024"},
     "pdu 'a' (10.0.0.1:161): unknown SNMPv3 auth protocol 'SHA1024'; known: none, MD5, SHA,"),
    ({"profile": "generic"}, 'profile "generic" needs oids'),
])
def test_driver_refuses_a_bad_configuration_before_any_io(overrides: dict[str, object], message: str) -> None:
    from agent.config.model import PduConfig
    from drivers.snmp_pdu.driver import SnmpPduDriver

    with pytest.raises(ValueError) as err:
        SnmpPduDriver(PduConfig(id="a", host="10.0.0.1", **overrides))  # type: ignore[arg-type]
    assert message in str(err.value)
