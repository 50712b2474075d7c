"""`WrappingTransport`: a transport in front of another, passing everything through.

Rules: the base for transports that change one thing about another one (wan.py delays
outgoing frames; the chat demo's hold/release filters incoming ones). Every method of the
contract goes to `inner` unchanged, stats included; a subclass overrides only what it
changes, and keeps the contract (abcast.transport.base) for everything else.
"""

from __future__ import annotations

from abcast.ids import NodeId
from abcast.transport.base import FrameHandler, Transport


class WrappingTransport(Transport):
    def __init__(self, inner: Transport) -> None:
        self.inner = inner
        self.stats = inner.stats

    async def start(self, node: NodeId, on_frame: FrameHandler) -> str:
        return await self.inner.start(node, on_frame)

    def add_peer(self, node: NodeId, address: str) -> None:
        self.inner.add_peer(node, address)

    def remove_peer(self, node: NodeId) -> None:
        self.inner.remove_peer(node)

    def send(self, node: NodeId, data: bytes) -> None:
        self.inner.send(node, data)

    def cork(self) -> None:
        self.inner.cork()

    def uncork(self) -> None:
        self.inner.uncork()

    def buffered(self, node: NodeId | None = None) -> int:
        return self.inner.buffered(node)

    async def drain(self, node: NodeId | None = None) -> None:
        await self.inner.drain(node)

    async def close(self) -> None:
        await self.inner.close()

    @property
    def node(self) -> NodeId:
        return self.inner.node

    @property
    def address(self) -> str:
        return self.inner.address

    @property
    def peers(self) -> tuple[NodeId, ...]:
        return self.inner.peers

    @property
    def max_frame_bytes(self) -> int | None:
        return self.inner.max_frame_bytes

    @property
    def datagram_frame_bytes(self) -> int | None:
        return self.inner.datagram_frame_bytes
