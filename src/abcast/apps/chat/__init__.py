"""`abcast demo chat`: the chat demo as a web app — one page per participant, groups as
tabs, and a debug panel that shows each group's ordering at work.

Rules: one process is one participant: one abcast node (abcast.apps.chat.node) and a
local web server (abcast.apps.chat.web) whose page talks to it over a websocket. With
`--registry` it uses that registry; without, it starts one in-process and prints its URL
for the other participants. It prints one line, `chat <page url> node <id> registry
<url>`, once the page can be opened, and runs until Ctrl-C or SIGTERM, leaving its groups
gracefully. It needs the `chat` extra (aiohttp).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys

import click

from abcast.cli_params import TRANSPORT, transport_help


@click.command("chat")
@click.option("--port", default=8080, show_default=True, type=click.IntRange(0, 65535),
              help="Port of the page (0: any free one).")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address the page is served on.")
@click.option("--registry", "registry_url", default=None, envvar="ABCAST_REGISTRY",
              show_envvar=True,
              help="The registry (tcp://host:port); default: start one in this process.")
@click.option("--transport", default="tcp://127.0.0.1:0", show_default=True,
              type=TRANSPORT, help=transport_help("Address this node's abcast transport "
                                                  "listens on"))
def chat(port: int, host: str, registry_url: str | None, transport: str) -> None:
    """A chat participant in the browser: groups as tabs, a debug panel per group."""
    try:
        import aiohttp  # noqa: F401
    except ImportError:
        click.echo("abcast: error: the chat demo needs aiohttp: pip install 'abcast[chat]'",
                   err=True)
        sys.exit(2)
    from abcast.apps.groups import _run

    sys.exit(_run(_main(port, host, registry_url, transport)))


async def _main(port: int, host: str, registry_url: str | None, transport: str) -> int:
    from abcast.apps.chat.node import ChatNode
    from abcast.apps.chat.web import serve
    from abcast.registry.server import RegistryServer

    own_registry = None
    if registry_url is None:
        own_registry = RegistryServer()
        await own_registry.start()
        registry_url = own_registry.url
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        async with ChatNode(registry_url, transport) as node:
            try:
                runner, url = await serve(node, host, port)
            except OSError as exc:  # the port is taken, the host is not ours, …
                where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
                click.echo(f"abcast: error: cannot serve the page on {where}: "
                           f"{exc.strerror or exc}", err=True)
                return 2
            try:
                sys.stdout.write(f"chat {url} node {node.node.id} registry {registry_url}\n")
                sys.stdout.flush()
                await stop.wait()
            finally:
                await runner.cleanup()
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        if own_registry is not None:
            with contextlib.suppress(Exception):
                await own_registry.close()
    return 0
