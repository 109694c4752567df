"""Configuration: one TOML file plus drop-ins → frozen objects (``agent.config.loader.load_config``).

Import the submodules: this package runs nothing, so a driver room can use the shared value rules
(``agent.config.checks``) without the assembler importing it back.
"""
