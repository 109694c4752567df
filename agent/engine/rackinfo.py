"""``rack_info``: the device facts the engine needs, from trace metadata and/or configuration.

Configuration wins over trace metadata (trace-format.md: "A --config TOML given to replay
overrides the metadata").
"""

from __future__ import annotations

from agent.config.model import Config, EngineSection
from agent.engine.frames import RackInfo
from agent.trace.model import TraceMeta


def rack_info(
    meta: TraceMeta | None = None, config: Config | None = None, engine: EngineSection | None = None
) -> RackInfo:
    eng = engine or (config.engine if config is not None else EngineSection())
    shares = dict(meta.crac_shares) if meta is not None else {}
    info = RackInfo(
        crac_shares=shares, gpu_max_power_w=eng.max_gpu_power_w, crac_max_power_w=eng.max_crac_power_w
    )
    if config is not None:
        for crac in config.cracs:
            info.crac_shares[crac.id] = crac.share
            info.interval_s[f"crac.{crac.id}.power_w"] = crac.interval_s
        for pdu in config.pdus:
            info.pdu_max_power_w[pdu.id] = pdu.max_power_w
            info.interval_s[f"pdu.{pdu.id}.power_w"] = pdu.interval_s
        from drivers.registry import gpu_nodes  # the drivers' own GPU numbering rule

        nodes = gpu_nodes(config)
        info.node_gpus = tuple(gpus for _, gpus in nodes)
        info.node_ids = tuple(node_id for node_id, _ in nodes)
    return info
