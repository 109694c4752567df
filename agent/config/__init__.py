"""Configuration: one TOML file plus drop-ins, parsed into frozen objects (``agent.config.model``)."""

from agent.config.model import (
    AgentSection,
    Config,
    CracConfig,
    EngineSection,
    ModbusRegister,
    MqttSection,
    NvmlSection,
    PduConfig,
    SnmpOid,
    StagesSection,
)

__all__ = [
    "AgentSection",
    "Config",
    "CracConfig",
    "EngineSection",
    "ModbusRegister",
    "MqttSection",
    "NvmlSection",
    "PduConfig",
    "SnmpOid",
    "StagesSection",
]
