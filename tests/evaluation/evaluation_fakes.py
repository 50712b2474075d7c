"""Fake bench results for the analysis and report tests: measured figures chosen so the
expected outputs are known exactly."""

from __future__ import annotations

from abcast.evaluation.analysis import model_factor
from abcast.evaluation.grid import TABLE_PAYLOAD, Experiment, PeerExperiment, Phase
from abcast.evaluation.results import (
    BenchResult,
    Figures,
    PeerMeasurement,
    PingMeasurement,
    RunMeasurement,
)

T_MSG_US = {"tcp": 30.0, "zmq": 100.0}
OVERHEAD_US = 500.0
CAPACITY = 7000.0  # the planted saturation of the fake load curve
RATES = (1000.0, 2000.0, 4000.0, 8000.0, 16000.0)
FLOOR_CAPACITY = 70000.0  # ten times abcast's: every saturation ratio is 0.1
FLOOR_RATES = (*RATES, 32000.0, 64000.0, 128000.0)
#: the floor's lone message per event loop: (p50, p99) µs
FLOOR_LONE = {"asyncio": (100.0, 200.0), "uvloop": (80.0, 150.0)}
#: the node processes' CPU over the 1,000 lone messages: 100 µs a message for the floor,
#: 250 for abcast (the relay run with busy polling reports none)
FLOOR_LONE_CPU_S = 0.1
LONE_CPU_S = 0.25
#: the PAIRED rounds: (floor p50, floor p99, abcast p50, abcast p99) µs; per round the p50
#: ratios are 2.5, 2.0 and 3.0 (median 2.5), the p99 ones 3.0, 2.0, 4.0 (median 3.0)
PAIRED_ROUNDS = ((100.0, 200.0, 250.0, 600.0), (80.0, 160.0, 160.0, 320.0),
                 (90.0, 150.0, 270.0, 600.0))
#: the PAIRED saturation rounds, 10,000 messages offered at 3 M/s: (floor msg/s, abcast
#: msg/s, abcast CPU s) with the floor's CPU FLOOR_SATURATION_CPU_S (2 µs a message);
#: per round the throughput ratios are 0.75, 0.5 and 0.8 (median 0.75), the CPU ones
#: 1.5, 2.0 and 1.3 (median 1.5)
PAIRED_SATURATION_ROUNDS = ((80000.0, 60000.0, 0.03), (100000.0, 50000.0, 0.04),
                            (50000.0, 40000.0, 0.026))
FLOOR_SATURATION_CPU_S = 0.02


def paired_runs() -> list[RunMeasurement]:
    """The PAIRED rounds of PAIRED_ROUNDS, then those of PAIRED_SATURATION_ROUNDS, in the
    order the grid runs them."""
    runs = []
    for round_, (floor_p50, floor_p99, p50, p99) in enumerate(PAIRED_ROUNDS):
        pair = [RunMeasurement(Experiment(Phase.PAIRED, "sequencer", "tcp", 3, 64, 1000,
                                          trace=False, serial=True, event_loop="uvloop",
                                          floor=floor, round=round_),
                               f"paired-{round_}-{floor}", Figures(5000.0, p50, p50, p99),
                               True, cpu_s=FLOOR_LONE_CPU_S if floor else LONE_CPU_S)
                for floor, p50, p99 in ((True, floor_p50, floor_p99), (False, p50, p99))]
        runs += pair if round_ % 2 == 0 else pair[::-1]
    for round_, (floor_rate, rate, cpu_s) in enumerate(PAIRED_SATURATION_ROUNDS):
        pair = [RunMeasurement(Experiment(Phase.PAIRED, "sequencer", "tcp", 3, 64, 10_000,
                                          rate=3e6, trace=False, floor=floor, round=round_),
                               f"paired-saturation-{round_}-{floor}",
                               Figures(delivered, 9000.0, 8000.0, 20000.0), True, cpu_s=cpu)
                for floor, delivered, cpu in ((True, floor_rate, FLOOR_SATURATION_CPU_S),
                                              (False, rate, cpu_s))]
        runs += pair if round_ % 2 == 0 else pair[::-1]
    return runs


def table_run(ordering: str, transport: str, n: int, mean_us: float,
              violations: dict[str, int] | None = None) -> RunMeasurement:
    exp = Experiment(Phase.TABLE, ordering, transport, n, TABLE_PAYLOAD, 100)
    return RunMeasurement(exp, f"{ordering}-{transport}-n{n}", Figures(1000.0, mean_us,
                                                                       mean_us, mean_us),
                          True, violations=violations or {}, spark_violations={})


def exact_model_runs() -> list[RunMeasurement]:
    """Table cells that follow T = s·(n−1)·T_msg + OVERHEAD_US exactly."""
    runs = []
    for ordering in ("sequencer", "skeen", "chandra-toueg"):
        for transport, t_msg in T_MSG_US.items():
            for n in (2, 4, 6):
                factor = model_factor(ordering)
                assert factor is not None
                runs.append(table_run(ordering, transport, n,
                                      factor * (n - 1) * t_msg + OVERHEAD_US))
    return runs


def load_run(rate: float, delivered: float, *, complete: bool = True) -> RunMeasurement:
    exp = Experiment(Phase.LOAD, "sequencer", "tcp", 3, 64, 1000, rate=rate, trace=False)
    return RunMeasurement(exp, f"load-{rate:g}", Figures(delivered, 900.0, 800.0, 2000.0),
                          complete)


def fake_result() -> BenchResult:
    runs = exact_model_runs()
    runs.append(RunMeasurement(
        Experiment(Phase.BASELINE, "sequencer", "tcp", 3, 64, 600, trace=False), "base",
        Figures(5000.0, 700.0, 600.0, 1500.0), True))
    runs += [RunMeasurement(Experiment(Phase.SIZES, "sequencer", "tcp", 3, size, 100),
                            f"size-{size}", Figures(900.0, 800.0 + size / 100, 800.0, 900.0),
                            True, spark_violations={})
             for size in (10, 1024, 65536)]
    runs += [RunMeasurement(Experiment(Phase.LONE, "sequencer", "tcp", 3, 64, 1000, trace=False,
                                       serial=True, event_loop=loop),
                            f"lone-{loop}", Figures(5000.0, 210.0, p50, 600.0), True,
                            cpu_s=LONE_CPU_S)
             for loop, p50 in (("asyncio", 190.0), ("uvloop", 160.0))]
    runs.append(RunMeasurement(
        Experiment(Phase.LONE, "sequencer", "tcp", 3, 64, 1000, trace=False, serial=True,
                   event_loop="uvloop", relay=True, busy_poll_us=200),
        "lone-relay-poll", Figures(5000.0, 150.0, 95.0, 400.0), True))
    runs += [RunMeasurement(Experiment(Phase.FLOOR, "sequencer", "tcp", 3, 64, 1000,
                                       trace=False, serial=True, event_loop=loop,
                                       floor=True),
                            f"floor-lone-{loop}", Figures(10000.0, p50, p50, p99), True,
                            cpu_s=FLOOR_LONE_CPU_S)
             for loop, (p50, p99) in FLOOR_LONE.items()]
    runs += [RunMeasurement(Experiment(Phase.FLOOR, "sequencer", "tcp", 3, 64, 1000, rate=rate,
                                       trace=False, floor=True),
                            f"floor-{rate:g}", Figures(min(rate, FLOOR_CAPACITY) * 0.98, 90.0,
                                                       80.0, 300.0), True)
             for rate in FLOOR_RATES]
    runs += paired_runs()
    runs += [load_run(rate, min(rate, CAPACITY) * 0.98) for rate in RATES]
    runs.append(RunMeasurement(
        Experiment(Phase.VERIFY, "sequencer", "tcp", 3, 64, 1000, rate=4000.0), "verify",
        Figures(3900.0, 900.0, 800.0, 2000.0), True, spark_violations={}))
    peers = (
        PeerMeasurement(PeerExperiment("pysyncobj-tuned", 3, 64, 600), Figures(250.0, 11000.0,
                                                                               12000.0, 13000.0),
                        True),
        PeerMeasurement(PeerExperiment("pysyncobj-tuned", 3, 64, 10000, rate=1e5),
                        Figures(3500.0, 9e4, 9e4, 2e5), True),
        PeerMeasurement(PeerExperiment("redis", 3, 64, 600), Figures(), False,
                        skipped="redis-server is not installed: apt-get install redis-server"),
    )
    pings = tuple(PingMeasurement(t, 100, 2 * v, 2 * v) for t, v in T_MSG_US.items())
    return BenchResult(True, tuple(runs), peers, pings, wall_s=100.0, spark_s=20.0)
