"""Configuration: one TOML file plus drop-ins, parsed into frozen objects (``agent.config.model``).

``load_config(path, dropin_dir)`` (``agent.config.loader``) is the entry point; problems come as one
``ConfigError`` listing every ``ConfigIssue``. See docs/configuration.md. Import the submodules:
this package runs nothing, so a driver room (``drivers/*/config.py``) can use the shared value
rules (``agent.config.checks``) without the assembler importing it back.
"""
