"""``[[crac]] protocol = "snmp"``: loads, is refused clearly when half-configured, builds the SNMP driver."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.config.errors import ConfigError
from agent.config.loader import load_config
from drivers import registry
from drivers.snmp_crac.driver import SnmpCracDriver


def _load(tmp_path: Path, crac: str) -> object:
    secret = tmp_path / "crac.community"
    secret.write_text("public\n")
    secret.chmod(0o600)
    path = tmp_path / "agent.toml"
    path.write_text(f'[agent]\nsite = "dc1"\nrack = "r1"\n[nvml]\nenabled = false\n[[crac]]\n{crac}\n'
                    .replace("SECRET", str(secret)))
    return load_config(path)


def test_an_snmp_cooling_unit_loads_and_gets_the_snmp_driver(tmp_path: Path) -> None:
    config = _load(tmp_path, 'id = "lcp1"\nhost = "10.0.0.9"\nprotocol = "snmp"\nport = 161\n'
                             'profile = "auto"\ncommunity_file = "SECRET"\nshare = 0.5')
    (crac,) = config.cracs  # type: ignore[attr-defined]
    assert (crac.protocol, crac.port, crac.share) == ("snmp", 161, 0.5)
    (driver,) = registry.build_drivers(config)  # type: ignore[arg-type]
    assert isinstance(driver, SnmpCracDriver) and driver.device == "crac.lcp1"


@pytest.mark.parametrize(("crac", "message"), [
    ('protocol = "snmp"\nport = 161\nprofile = "auto"', "community_file: required with version"),
    ('protocol = "snmp"\nprofile = "auto"\ncommunity_file = "SECRET"', "502 is the Modbus TCP port"),
    ('protocol = "snmp"\nport = 161\nprofile = "liebert_icom"\ncommunity_file = "SECRET"',
     '"liebert_icom" is not an SNMP cooling-unit profile'),
    ('profile = "liebert_icom"\ncommunity_file = "SECRET"', 'only used with protocol = "snmp"'),
    ('profile = "auto"', 'profile = "auto" needs protocol = "snmp"'),
    ('protocol = "bacnet"', "protocol"),
])
def test_half_configured_units_are_refused_by_key(tmp_path: Path, crac: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        _load(tmp_path, f'id = "c"\nhost = "10.0.0.9"\n{crac}')
    assert any(message in str(issue) for issue in err.value.issues), [str(i) for i in err.value.issues]
