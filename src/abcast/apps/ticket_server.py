"""`abcast ticket-server`: the ticket server of ordering "ticket" as its own process.

Rules: one node, id `TICKET_NODE` ("ticket"), listening at `--listen`, serving the ticket
numbers of every group named by `--group` (one `TicketServer` stack each,
abcast.ordering.ticket.server_layers). It is no member of those groups: members reach it at
the address their group's `ticket=` option gives, and it answers them at the addresses
the registry holds for them (`--registry`, the one the members use). It keeps one
counter per group and nothing else; a crashed server is replaced by a member of the
group (abcast.ordering.ticket), never restarted into the same epoch. `TicketService` is
the same server inside a process (`abcast demo bank --ordering ticket` starts one).

The registry grants an id that is held only to the token that holds it, and it keeps
ids (it has no request to release one). So a server restarted on the same registry
reclaims `ticket` with the token it held before: `--token-file` keeps it (created with
a fresh token, mode 0600, on the first start). Without it every start has a new token,
and a restart is refused ("node id 'ticket' is taken") until the registry restarts.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import secrets
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Final

import click

from abcast.cli_params import NAME, REGISTRY_URL, TRANSPORT, fail, transport_help
from abcast.errors import AbcastError, ConfigError
from abcast.ids import View
from abcast.ordering.ticket import TICKET_NODE, server_layers
from abcast.registry.client import RegistryClient
from abcast.runtime.driver import GroupDriver
from abcast.runtime.node import Node
from abcast.runtime.stack_options import for_streams
from abcast.stack import Stack


class TicketService:
    """`async with TicketService(["bank"], registry=url) as ticket: … ticket.url …`"""

    def __init__(self, groups: Sequence[str], *, registry: str,
                 listen: str = "tcp://127.0.0.1:0", wan: str | None = None,
                 token: str | None = None) -> None:
        """`token`: the registry token to hold id `ticket` with (a restart that gives
        the same one reclaims the id); None: a fresh one."""
        if not groups:
            raise ConfigError("a ticket server needs at least one group to serve")
        self.groups = tuple(groups)
        client = RegistryClient(registry)
        if token is not None:
            client.token = token
        self.node = Node(listen, node=TICKET_NODE, registry=client, wan=wan)

    @property
    def url(self) -> str:
        """The address to give the groups as their `ticket=` option."""
        return self.node.address

    def issued(self, group: str) -> int:
        """Numbers handed out for `group` so far."""
        for driver in self.node.drivers():
            if driver.name == group:
                return int(driver.stack.inspect()[-1].clock.get("issued", 0))
        raise ConfigError(f"this ticket server does not serve {group!r}")

    async def start(self) -> TicketService:
        await self.node.start()
        channel = for_streams(None, self.node.transport.scheme).channel
        for group in self.groups:
            stack = Stack(TICKET_NODE, group, server_layers(channel), View(1, (TICKET_NODE,)))
            self.node.attach(GroupDriver(self.node, stack))
        return self

    async def close(self) -> None:
        await self.node.close()

    async def __aenter__(self) -> TicketService:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


@click.command("ticket-server")
@click.option("--registry", required=True, type=REGISTRY_URL,
              help="The registry the groups' members use (their addresses are there).")
@click.option("--group", "groups", multiple=True, required=True, type=NAME,
              help="A group to number (repeatable).")
@click.option("--listen", default="tcp://127.0.0.1:0", show_default=True, type=TRANSPORT,
              help=transport_help("Address to serve on: the groups' ticket= option"))
@click.option("--wan", default=None, type=click.Path(dir_okay=False, exists=True),
              help="Emulate WAN links (transport/wan.py); the matrix places node 'ticket'.")
@click.option("--token-file", "token_file", default=None,
              type=click.Path(dir_okay=False, path_type=Path),
              help="Keep the registry token here (created on the first start), so that a "
                   "restart on the same registry reclaims node id 'ticket'.")
@click.option("--json", "as_json", is_flag=True,
              help='First stdout line is {"url": ...}, the address actually bound.')
def ticket_server(registry: str, groups: tuple[str, ...], listen: str, wan: str | None,
                  token_file: Path | None, as_json: bool) -> None:
    """Hand out the ticket numbers of groups with ordering "ticket" until interrupted."""
    token = None if token_file is None else _token(token_file)

    async def serve() -> None:
        service = TicketService(groups, registry=registry, listen=listen, wan=wan,
                                token=token)
        await service.start()
        click.echo(json.dumps({"url": service.url}) if as_json
                   else f"ticket server for {', '.join(groups)} at {service.url}")
        sys.stdout.flush()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        try:
            await stop.wait()
        finally:
            await service.close()

    try:
        asyncio.run(serve())
    except (AbcastError, OSError) as exc:
        hint = (" (a restarted server reclaims it with the --token-file it used)"
                if "is taken" in str(exc) and token_file is None else "")
        fail(f"{exc}{hint}")


_TOKEN: Final = re.compile(r"[0-9a-f]{32}")


def _token(path: Path) -> str:
    """The token kept in `path`, or a fresh one written there (0600); exit 2 if the
    file cannot be one."""
    try:
        text = path.read_text().strip()
    except FileNotFoundError:
        text = secrets.token_hex(16)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as file:
                file.write(text + "\n")
        except OSError as exc:
            fail(f"cannot create --token-file {str(path)!r}: {exc.strerror or exc}")
    except (OSError, UnicodeDecodeError) as exc:
        fail(f"cannot read --token-file {str(path)!r}: {exc}")
    if _TOKEN.fullmatch(text) is None:
        fail(f"--token-file {str(path)!r} holds no ticket-server token (32 hex digits)")
    return text
