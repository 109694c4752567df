"""The configuration as frozen, typed objects: what every other module receives.

This module only declares shapes and defaults; ``agent.config.loader`` parses TOML into them and
validates. Defaults here are the documented defaults of ``packaging/agent.toml``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from drivers.dcgm_exporter.config import DcgmSection


@dataclass(frozen=True)
class AgentSection:
    site: str
    rack: str
    state_dir: Path = Path("/var/lib/rackwatt")
    tick_s: float = 1.0  # the engine's frame tick; devices are polled at their own intervals


@dataclass(frozen=True)
class MqttSection:
    enabled: bool = True
    host: str = "localhost"
    port: int = 1883
    client_id: str = ""  # empty: "rackwatt-<site>-<rack>"
    ca_file: Path | None = None  # set → TLS
    cert_file: Path | None = None
    key_file: Path | None = None
    username: str | None = None
    password_file: Path | None = None
    topic_root: str = "rackwatt/v1"
    qos: int = 1
    keepalive_s: int = 30
    summary_interval_s: float = 120.0  # plus one at every window close
    spool_max_mb: float = 64.0


@dataclass(frozen=True)
class SnmpOid:
    """One OID of the generic PDU profile: value × scale is the canonical signal."""

    oid: str
    signal: str  # canonical suffix, e.g. "power_w", "energy_kwh", "voltage_v"
    scale: float = 1.0


@dataclass(frozen=True)
class PduConfig:
    id: str
    host: str
    port: int = 161
    version: str = "2c"  # "2c" | "3"
    community_file: Path | None = None  # v2c: community read from this file
    user: str | None = None  # v3 USM user
    auth_protocol: str = "SHA"  # MD5 | SHA | SHA224 | SHA256 | SHA384 | SHA512
    auth_key_file: Path | None = None
    priv_protocol: str = "AES"  # DES | AES | AES192 | AES256 | none
    priv_key_file: Path | None = None
    context: str = ""  # v3 context name
    profile: str = "auto"
    interval_s: float = 5.0
    timeout_s: float = 1.0
    retries: int = 1
    deadline_s: float | None = None  # whole-poll deadline; None → 0.8 × interval_s
    max_power_w: float = 30000.0  # physical maximum for input hygiene
    oids: tuple[SnmpOid, ...] = ()  # generic profile only
    detail_signals: bool = False  # also per unit/cord/phase: pdu.<id>.unit1.phase2.current_a


@dataclass(frozen=True)
class ModbusRegister:
    """One register of the generic cooling-unit map."""

    address: int
    signal: str  # canonical suffix, e.g. "power_w", "supply_temp_c"
    table: str = "holding"  # holding | input
    type: str = "u16"  # u16 | s16 | u32 | s32 | f32
    word_order: str = "big"  # big | little
    scale: float = 1.0
    unit: str = ""


@dataclass(frozen=True)
class CracConfig:
    id: str
    host: str
    port: int = 502
    unit_id: int = 1
    profile: str = "generic"
    share: float = 1.0  # fraction of this unit's power attributed to this rack, in (0, 1]
    interval_s: float = 10.0
    timeout_s: float = 1.0
    retries: int = 1
    framer: str = "socket"  # socket (Modbus TCP) | rtu (RTU over a TCP gateway)
    rated_fan_power_w: float | None = None  # for the power estimate when the unit exposes none
    rated_compressor_power_w: float | None = None
    cooling_kind: str | None = None  # dx | chilled_water | unknown; None → the profile's (estimate only)
    registers: tuple[ModbusRegister, ...] = ()  # generic profile only
    # protocol = "snmp": the unit's SNMP agent (read-only GET/GETBULK), same keys as [[pdu]]
    protocol: str = "modbus"  # modbus | snmp
    version: str = "2c"
    community_file: Path | None = None
    user: str | None = None
    auth_protocol: str = "SHA"
    auth_key_file: Path | None = None
    priv_protocol: str = "AES"
    priv_key_file: Path | None = None
    context: str = ""
    deadline_s: float | None = None


@dataclass(frozen=True)
class NvmlSection:
    enabled: bool = True
    gpus: tuple[int, ...] | None = None  # None → all GPUs
    interval_s: float = 1.0


@dataclass(frozen=True)
class StagesSection:
    socket_path: Path | None = Path("/run/rackwatt/stage.sock")  # Unix datagram socket; None → off
    udp_port: int | None = None  # UDP on 127.0.0.1; None → off
    mqtt_hints: bool = True  # subscribe to <root>/<site>/<rack>/hint on the site broker
    hint_ttl_s: float = 600.0  # a hint older than this expires to "unknown"
    rate_limit_per_s: float = 50.0  # per source; excess hints are dropped and counted
    # who may send commands (`rackwatt accept`) over the Unix socket; None → root and the agent's
    # own user / the agent's own group (names or numbers). UDP never carries commands.
    command_uids: tuple[int, ...] | None = None
    command_groups: tuple[str, ...] | None = None


@dataclass(frozen=True)
class EngineSection:
    window_s: float = 900.0
    learning_rate: float = 0.02  # weight of a new observation in the per-stage level/band
    forgetting_halflife_h: float = 24.0  # how fast old data stops counting (response model)
    false_alarms_per_30d: float = 1.0  # drift detector target on healthy data
    accept_after_h: float | None = 72.0  # an unacknowledged deviation becomes the new normal after this
    max_gpu_power_w: float = 1500.0  # input hygiene: physical maxima
    max_crac_power_w: float = 200000.0
    # Rows resuming after a gap longer than this (a state restored from long ago, an agent powered
    # off for weeks) re-warm: the learned model is forgotten. 7 × the default forgetting half-life:
    # had the rack kept running, what was learned before would weigh under 1 % (0.5**7) by now.
    max_state_age_h: float | None = 168.0


@dataclass(frozen=True)
class MetricsSection:
    """``/metrics`` for Prometheus (docs/metrics.md): off unless enabled, loopback unless told."""

    enabled: bool = False
    address: str = "127.0.0.1"  # loopback: a scraper elsewhere needs it said (or a reverse proxy)
    port: int = 9860
    cert_file: Path | None = None  # with key_file: serve HTTPS
    key_file: Path | None = None
    client_ca_file: Path | None = None  # set: scrapers must present a certificate signed by this CA
    node: str = ""  # the `node` label; empty: this host's name
    row: str = ""  # where the rack stands, for fleet dashboards (rackwatt_info labels)
    hall: str = ""
    max_jobs: int = 8  # job ids kept as label values (the most recently seen); see docs/metrics.md


@dataclass(frozen=True)
class Config:
    agent: AgentSection
    mqtt: MqttSection = field(default_factory=MqttSection)
    pdus: tuple[PduConfig, ...] = ()
    cracs: tuple[CracConfig, ...] = ()
    nvml: NvmlSection = field(default_factory=NvmlSection)
    dcgms: tuple[DcgmSection, ...] = ()  # GPU nodes' dcgm-exporters, in rack GPU order
    stages: StagesSection = field(default_factory=StagesSection)
    engine: EngineSection = field(default_factory=EngineSection)
    metrics: MetricsSection = field(default_factory=MetricsSection)
    source: Path | None = None  # the file it was loaded from, for messages
    warnings: tuple[str, ...] = ()  # non-fatal findings of the loader (e.g. a secret file others can read)
