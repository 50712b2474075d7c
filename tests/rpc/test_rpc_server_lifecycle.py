"""A `Server` ends with its group, and a `Client` that cannot connect leaves nothing
open. A server ends with its group: when the group it serves closes, is left, or removes
this member, the server's `requests()` iterator ends and its request endpoint is closed
on the node — without the application having to call `server.close()` as well. (Before,
a server made without a handler left every `async for req in server.requests()` waiting
forever once its group had ended, and a node that hosts groups kept routing the group's
request endpoint to the dead server: a new server of that group on the node was refused,
"node already routes 'rpc:svc'".)"""

from __future__ import annotations

import asyncio

import pytest

from abcast import RegistryServer
from abcast.rpc import IncomingRequest, Server
from abcast.runtime.node import Node

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("how", ["close", "leave"])
def test_a_server_ends_with_its_group(how: str) -> None:
    async def main() -> None:
        async with RegistryServer() as registry:
            host = await Node("tcp://127.0.0.1:0", registry=registry.url).start()
            try:
                server, group = await Server.create("svc", ordering="sequencer", host=host)
                seen: list[IncomingRequest] = []

                async def serve() -> None:
                    async for req in server.requests():
                        seen.append(req)

                reader = asyncio.create_task(serve())
                await asyncio.sleep(0)
                await (group.close() if how == "close" else group.leave())
                # the group ended here: the iterator ends (no server.close() needed)
                await asyncio.wait_for(reader, 10)
                assert seen == []
                # and the node no longer routes the group's endpoint to the old server
                again, group2 = await Server.create("svc", ordering="sequencer", host=host,
                                                    on_request=lambda r: b"")
                again.close()
                await group2.close()
            finally:
                await host.close()

    asyncio.run(main())


def test_a_client_that_cannot_reach_the_servers_closes_its_node(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The registry names servers on another transport (mem:// here, the client on
    tcp://): connect is a ConfigError saying so, and the node it started is closed. Before,
    that node stayed open — its listening socket and tasks — with nothing to close it."""
    from abcast.errors import ConfigError, LocalProtocolError
    from abcast.rpc import Client
    from abcast.rpc import client as client_module

    made: list[Node] = []

    class Recorded(Node):
        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, **kwargs)  # type: ignore[arg-type]
            made.append(self)

    monkeypatch.setattr(client_module, "Node", Recorded)

    async def main() -> None:
        async with RegistryServer() as registry:
            _, group = await Server.create("svc", ordering="sequencer",
                                           registry=registry.url, transport="mem://",
                                           on_request=lambda r: b"")
            try:
                with pytest.raises(ConfigError, match="scheme 'mem'"):
                    await Client.connect("svc", registry=registry.url)
                assert len(made) == 1
                with pytest.raises(LocalProtocolError):  # a closed node opens nothing
                    made[0].open_endpoint("probe", lambda link, env: None)
            finally:
                await group.close()

    asyncio.run(main())
