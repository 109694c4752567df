"""What this rack's data lets the engine do right now: said in every summary, never left implicit.

A rack without GPU telemetry (a gateway with no GPUs and no node source, or every GPU source
down) still gets predictions from stages and work rate, cooling and thermal detection; but the
detections that compare PDU power with GPU power cannot run. Saying "no drift" there would be a
claim the data cannot support, so the summary says which detections are off and why.
"""

from __future__ import annotations

import math
from typing import Any

from agent.engine.components import ComponentSample

NO_GPU = "off: no GPU telemetry (configure [[dcgm]] nodes or node agents)"


def capabilities(
    sample: ComponentSample | None, gpu_fresh: bool, warm: bool, predicts_from_gpu: bool
) -> dict[str, Any]:
    """``{"gpu_telemetry": bool, "inlet_telemetry": bool, "cooling_telemetry": bool,
    "prediction": "gpu" | "stages" | "warming_up", "detections": {cause: "on" | "off: why"}}``."""
    gpu = gpu_fresh
    inlet = sample is not None and math.isfinite(sample.inlet_spread_c)
    cooling = sample is not None and math.isfinite(sample.cooling_measured_w)
    prediction = "warming_up" if not warm else "gpu" if predicts_from_gpu else "stages"
    return {
        "gpu_telemetry": gpu,
        "inlet_telemetry": inlet,
        "cooling_telemetry": cooling,
        "prediction": prediction,
        "detections": {
            "cooling": "on" if cooling else "off: no cooling-unit power",
            "thermal": "on" if inlet else "off: no rack inlet temperatures",
            "power_chain": "on" if gpu else NO_GPU,
            "gpu_hardware": "on" if gpu else NO_GPU,
        },
    }
