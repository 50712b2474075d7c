"""T_msg: the one-way time of one message on one middleware, from a ping between two
processes (the model's unit cost, thesis §5.2).

Rules: a child process (`python -m abcast.evaluation.ping SCHEME`) starts an echo
transport of the same scheme on 127.0.0.1:0 and sends every frame it receives straight
back; this process sends one frame, awaits its echo, and repeats `rounds` times after a
few warm-up rounds (connection set-up and first-use costs are not a message's cost).
T_msg is half the median round trip. The addresses cross through the child's stdin and
stdout; closing its stdin ends it. Nothing here knows orderings or clusters; a failure
becomes a `PingMeasurement` with an error, never an exception, so one broken middleware
does not end the bench.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from statistics import fmean, median
from typing import Final

from abcast.errors import ConfigError
from abcast.evaluation.results import PingMeasurement
from abcast.ids import NodeId
from abcast.transport import Link, Transport, transport_from_url

WARM_UP_ROUNDS: Final = 20
PING_TIMEOUT_S: Final = 30.0
PINGER: Final = NodeId("pinger")
ECHO: Final = NodeId("echo")


def _bind_url(scheme: str) -> str:
    return "mem://" if scheme == "mem" else f"{scheme}://127.0.0.1:0"


async def _echo(scheme: str) -> None:
    """Child: print the echo's address, read the pinger's, echo until stdin closes."""
    loop = asyncio.get_running_loop()
    echo = transport_from_url(_bind_url(scheme))

    def bounce(_link: Link, frame: bytes) -> None:
        echo.send(PINGER, frame)

    print(await echo.start(ECHO, bounce), flush=True)
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    echo.add_peer(PINGER, (await reader.readline()).decode().strip())
    print("ok", flush=True)  # only now can a frame be echoed: the pinger waits for this
    await reader.read()  # EOF: the pinger is done
    await echo.close()


class _Echoes:
    def __init__(self) -> None:
        self.waiting: asyncio.Future[None] | None = None

    def __call__(self, _link: Link, _frame: bytes) -> None:
        if self.waiting is not None and not self.waiting.done():
            self.waiting.set_result(None)


async def _rounds(pinger: Transport, echoes: _Echoes, rounds: int, size: int) -> list[int]:
    loop = asyncio.get_running_loop()
    frame = bytes(size)
    samples: list[int] = []
    for i in range(WARM_UP_ROUNDS + rounds):
        echoes.waiting = loop.create_future()
        started = time.perf_counter_ns()
        pinger.send(ECHO, frame)
        async with asyncio.timeout(PING_TIMEOUT_S):
            await echoes.waiting
        if i >= WARM_UP_ROUNDS:
            samples.append(time.perf_counter_ns() - started)
    return samples


async def _ping_in_process(rounds: int, size: int) -> PingMeasurement:
    """mem:// hubs are per process: both ends are transports of this one."""
    echo = transport_from_url("mem://")
    pinger = transport_from_url("mem://")

    def bounce(_link: Link, frame: bytes) -> None:
        echo.send(PINGER, frame)

    echoes = _Echoes()
    try:
        echo_address = await echo.start(ECHO, bounce)
        echo.add_peer(PINGER, await pinger.start(PINGER, echoes))
        pinger.add_peer(ECHO, echo_address)
        samples = await _rounds(pinger, echoes, rounds, size)
        return PingMeasurement("mem", rounds, median(samples) / 1e3, fmean(samples) / 1e3,
                               size=size)
    finally:
        await pinger.close()
        await echo.close()


async def ping(scheme: str, rounds: int, size: int = 100) -> PingMeasurement:
    """Median and mean round trip of `size`-byte frames to an echo in another process
    (in this one for mem://)."""
    if scheme == "mem":
        return await _ping_in_process(rounds, size)
    try:
        pinger = transport_from_url(_bind_url(scheme))  # an unknown scheme fails here
    except ConfigError as exc:
        return PingMeasurement(scheme, rounds, None, None, error=str(exc), size=size)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "abcast.evaluation.ping", scheme,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL)
    assert proc.stdin is not None and proc.stdout is not None
    started = False
    try:
        async with asyncio.timeout(PING_TIMEOUT_S):
            line = await proc.stdout.readline()
        if not line:
            raise ConnectionError(f"the {scheme} echo process exited before it started")
        echoes = _Echoes()
        address = await pinger.start(PINGER, echoes)
        started = True
        proc.stdin.write(address.encode() + b"\n")
        async with asyncio.timeout(PING_TIMEOUT_S):
            took = await proc.stdout.readline()
        if took.strip() != b"ok":
            raise ConnectionError(f"the {scheme} echo process did not take the address")
        pinger.add_peer(ECHO, line.decode().strip())
        samples = await _rounds(pinger, echoes, rounds, size)
        return PingMeasurement(scheme, rounds, median(samples) / 1e3, fmean(samples) / 1e3,
                               size=size)
    except Exception as exc:  # a broken middleware is a figure missing, not a crash
        return PingMeasurement(scheme, rounds, None, None, error=f"{type(exc).__name__}: {exc}",
                               size=size)
    finally:
        if started:
            await pinger.close()
        with contextlib.suppress(ConnectionError, RuntimeError):
            proc.stdin.close()
        try:
            async with asyncio.timeout(10):
                await proc.wait()
        except TimeoutError:
            proc.kill()
            await proc.wait()


if __name__ == "__main__":
    asyncio.run(_echo(sys.argv[1]))
