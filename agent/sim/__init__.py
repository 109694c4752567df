"""The rack twin: a physically plausible simulated GPU training rack (docs/twin.md).

Stable API (used by tests, benchmarks, replay and the live demo)::

    from agent.sim import FaultSpec, RackTwin, make_scenario, scenario_truth, simulate, trace_meta

    sc = make_scenario("fault_cooling", days=3, seed=7)        # gpus=16, hints=True, fault=None
    sc = make_scenario("steady", days=2, seed=1, fault=FaultSpec("hotspot", start_h=20))
    for chunk in simulate(sc):      # agent.trace.model.TraceChunk, 1-s rows, ≤ 3600 rows each, in time order
        ...
    truth = scenario_truth(sc)      # JSON-able dict: faults, workload_changes, jobs, stage_segments
    meta = trace_meta(sc)           # = sc.meta: TraceMeta (rack, site, crac.1.share=0.25, interval_s=1)
    cols = columns(sc)              # header for agent.trace.writer.TraceWriter; decimals(sc) its resolution

    twin = RackTwin(sc)             # stepping, for fake devices
    twin.advance_to(sc.start_ts + 125.0)
    twin.device_values()            # {"gpu.0": {"power_w": …}, "pdu.a": {…}, "crac.1": {…}, "inlet": {…}, …}
    twin.stage()                    # ("forward_backward", "j000")
    twin.gpu_values()               # {0: {"power_w": …, "energy_j": …, "power_limit_w": 700.0, …}, …}
    twin.pdu_values("a")            # feed a + "inlet.<pos>.temp_c"; twin.crac_values() for the cooling unit

    sc = random_scenario(10003, "churn", days=0.25)   # a randomised rack (agent.sim.randomize)

``device_values()`` are the clean instantaneous values; the trace adds sampling, misses, outages
and glitches on top. ``make_scenario(..., start_ts=time.time())`` places a run at wall-clock time.

Scenario names: ``SCENARIOS`` (steady, plateau, tide, fault_cooling, fault_setpoint,
fault_power_chain, fault_hotspot, fault_gpu_ageing, fault_gpu_driver, workload_change, lag_steps,
mixed). Fault kinds: ``FAULT_KINDS`` (cooling, setpoint, power_chain, hotspot, gpu_ageing,
gpu_driver). The same scenario (name, days, seed, gpus, faults) always yields the same trace.
"""

from agent.sim.faults import FAULT_KINDS, FaultSpec
from agent.sim.randomize import FAMILIES, random_scenario
from agent.sim.scenarios import SCENARIOS, Scenario, make_scenario
from agent.sim.twin import RackTwin, columns, decimals, scenario_truth, simulate, trace_meta
from agent.trace.model import TraceChunk, TraceMeta

__all__ = [
    "FAMILIES", "FAULT_KINDS", "SCENARIOS", "FaultSpec", "RackTwin", "Scenario", "TraceChunk", "TraceMeta",
    "columns", "decimals", "make_scenario", "random_scenario", "scenario_truth", "simulate", "trace_meta",
]
