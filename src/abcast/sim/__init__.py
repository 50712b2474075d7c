"""The deterministic simulator: seeded network, virtual time, the same traces as the runtime."""

from abcast.sim.faults import FaultPlan, parse_faults
from abcast.sim.harness import SimConfig, SimResult, run_simulation

__all__ = ["FaultPlan", "SimConfig", "SimResult", "parse_faults", "run_simulation"]
