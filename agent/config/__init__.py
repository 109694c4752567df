"""Configuration: one TOML file plus drop-ins, parsed into frozen objects (``agent.config.model``).

``load_config(path, dropin_dir)`` (``agent.config.loader``) is the entry point; problems come as one
``ConfigError`` listing every ``ConfigIssue``. See docs/configuration.md.
"""

from agent.config.errors import ConfigError, ConfigIssue
from agent.config.loader import load_config
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
from agent.config.secrets import SecretError, read_secret

__all__ = [
    "AgentSection",
    "Config",
    "ConfigError",
    "ConfigIssue",
    "CracConfig",
    "EngineSection",
    "ModbusRegister",
    "MqttSection",
    "NvmlSection",
    "PduConfig",
    "SecretError",
    "SnmpOid",
    "StagesSection",
    "load_config",
    "read_secret",
]
