"""Types of the optional C extension abcast._lane (src/abcast/_native/lane_module.c): a
steady frame's whole stack step. Not built everywhere: use it through
abcast.runtime.lane."""

from typing import Any, Final

SOURCE_HASH: Final[str]
PLANTS: Final[dict[int, str]]

def receive(
    frame: bytes, peer: str | None, lanes: dict[str, tuple[Any, Any]], now: int, /,
) -> tuple[Any, list[Any]] | None: ...
def broadcast(stack: Any, payload: bytes, now: int, /) -> list[Any] | None: ...
def pump(inbound: Any, data: bytes, node: Any, /) -> bool: ...
def pump_counts() -> dict[str, int]: ...  # reads, frames, passed
def carry_out(driver: Any, outputs: list[Any], now: int, /) -> None: ...
def write_counts() -> dict[str, int]: ...  # packets, runs
def counts() -> dict[str, int]: ...  # taken, frames, broadcasts, declined
def reset_counts() -> None: ...
def plant(k: int, /) -> None: ...
