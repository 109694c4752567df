"""Drift detection and cause attribution over the engine's per-component residuals.

``DriftMonitor.observe(ComponentSample)`` → report ``event`` dicts; ``held`` / ``relearn`` tell
the engine which components must stop learning or re-learn fast; ``accept`` takes an operator's
"this is the new normal". See docs/drift-playbook.md for what each cause means.
"""

from agent.engine.components import residuals
from agent.engine.drift.attribution import CAUSES
from agent.engine.drift.monitor import CHANNELS, LEARNING_COMPONENTS, DriftMonitor

__all__ = ["CAUSES", "CHANNELS", "LEARNING_COMPONENTS", "DriftMonitor", "residuals"]
