"""The configuration as frozen, typed objects: what every other module receives.

The agent's own sections and defaults (those documented in ``packaging/agent.toml``), assembled
with the device sections the driver rooms declare (``drivers/*/config.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from agent.node.config import NodeLinkSection, NodeSection, UplinkSection
from drivers.dcgm_exporter.config import DcgmSection
from drivers.modbus_crac.config import CracConfig, ModbusRegister
from drivers.nvml_gpu.config import NvmlSection
from drivers.snmp_pdu.config import PduConfig, SnmpOid

# The device sections are owned by their driver rooms; named here too, where the whole
# configuration is assembled, so ``agent.config.model.PduConfig`` keeps meaning what it did.
__all__ = ["CracConfig", "DcgmSection", "ModbusRegister", "NvmlSection", "PduConfig", "SnmpOid"]


@dataclass(frozen=True)
class AgentSection:
    site: str
    rack: str
    state_dir: Path = Path("/var/lib/rackwatt")
    tick_s: float = 1.0  # the engine's frame tick; devices are polled at their own intervals
    role: str = "rack"  # "rack": the gateway's agent; "node": a GPU node sending to it (agent/node)


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
    nodes: tuple[NodeSection, ...] = ()  # GPU nodes running role = "node", in rack GPU order
    node_link: NodeLinkSection = field(default_factory=NodeLinkSection)  # the rack's listener for them
    uplink: UplinkSection | None = None  # role = "node": where this node sends
    stages: StagesSection = field(default_factory=StagesSection)
    engine: EngineSection = field(default_factory=EngineSection)
    metrics: MetricsSection = field(default_factory=MetricsSection)
    source: Path | None = None  # the file it was loaded from, for messages
    warnings: tuple[str, ...] = ()  # non-fatal findings of the loader (e.g. a secret file others can read)
