"""`abcast group …`: dynamic groups from a terminal — create, join, leave, list, members,
remove.

Rules: `create` and `join` open a line session on one node: every line typed is
broadcast to the group, every delivery is printed as `<origin>> <text>` in the group's
delivery order (one's own lines too, when the group has ordered them), every view
change as `* view <id>: <members>`. `/members` prints the current view; `/leave`,
end of input (Ctrl-D), Ctrl-C (SIGINT) or SIGTERM leave the group gracefully, print
`left <group>` and exit 0. A session the group removed (this node was suspected) prints
`* removed from <group>` and exits 1. `list`, `members` and `remove` only talk to the
registry. Every command needs `--registry` (or ABCAST_REGISTRY). Exit code 2 and one
line on stderr for bad arguments, a refusal (a name taken, a group unknown), a
registry that does not answer within `--timeout`, or a join not admitted in that time:
`--timeout` is the group's own deadline (`join_timeout_s`, abcast.runtime.joining), whose
TimeoutError names the step it waited for, and that line is what is printed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any, Final

import click

from abcast.cli_params import (
    EXIT_USAGE,
    NAME,
    PREFIX,
    REGISTRY_URL,
    SECONDS,
    TRANSPORT,
    GroupFlags,
    fail,
    group_options,
    group_secret,
    ordering_options,
    secret_option,
    transport_help,
)
from abcast.effects import Deliver
from abcast.errors import AbcastError, ConfigError
from abcast.ids import View
from abcast.ordering.registry import ORDERINGS, OrderingOptions
from abcast.registry.client import REGISTRY_TIMEOUT_S

EXIT_REMOVED: Final = 1

registry_option = click.option(
    "--registry", "registry_url", required=True, envvar="ABCAST_REGISTRY", type=REGISTRY_URL,
    show_envvar=True, help="The registry (tcp://host:port), e.g. from `abcast registry`.")
timeout_option = click.option(
    "--timeout", default=REGISTRY_TIMEOUT_S, show_default=True, type=SECONDS,
    help="Seconds to wait for the registry (and, for join, to be admitted).")
name_argument = click.argument("name", type=NAME)


def _error(message: str) -> int:
    click.echo(f"{PREFIX}{message}", err=True)
    return EXIT_USAGE


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


@click.group("group")
def group() -> None:
    """Dynamic groups: create one, join it from another terminal, send lines, leave."""


# ---------------------------------------------------------------- sessions


class _Stdin:
    """Lines from standard input on the event loop (raw reads, so that two lines that
    arrive together are both seen); None marks the end of input. A terminal or a pipe is
    watched by the loop; a regular file or /dev/null (which the loop cannot watch) is
    read by a thread."""

    def __init__(self) -> None:
        self.lines: asyncio.Queue[str | None] = asyncio.Queue()
        self._pending = b""
        self._fd = sys.stdin.fileno()
        loop = asyncio.get_running_loop()
        try:
            loop.add_reader(self._fd, self._read)
        except (PermissionError, ValueError, OSError):
            threading.Thread(target=self._read_blocking, args=(loop,), daemon=True,
                             name="abcast-stdin").start()

    def _read_blocking(self, loop: asyncio.AbstractEventLoop) -> None:
        while True:
            try:
                chunk = os.read(self._fd, 65536)
            except OSError:
                chunk = b""
            try:
                loop.call_soon_threadsafe(self._take, chunk)
            except RuntimeError:
                return  # the loop is closed: the session is over
            if not chunk:
                return

    def _read(self) -> None:
        chunk = os.read(self._fd, 65536)
        if not chunk:
            asyncio.get_running_loop().remove_reader(self._fd)
        self._take(chunk)

    def _take(self, chunk: bytes) -> None:
        if not chunk:
            if self._pending:
                self.lines.put_nowait(self._pending.decode(errors="replace"))
            self.lines.put_nowait(None)
            return
        *whole, self._pending = (self._pending + chunk).split(b"\n")
        for line in whole:
            self.lines.put_nowait(line.decode(errors="replace").rstrip("\r"))

    def close(self) -> None:
        with contextlib.suppress(ValueError, OSError):
            asyncio.get_running_loop().remove_reader(self._fd)


def _show_delivery(delivery: Deliver) -> None:
    _say(f"{delivery.origin}> {delivery.payload.decode(errors='replace')}")


class _Views:
    """Prints view changes; those installed before the session opened wait until it has
    (a refused create prints nothing but its error)."""

    def __init__(self) -> None:
        self.me: str | None = None
        self._early: list[View] = []

    def show(self, view: View) -> None:
        if self.me is None:
            self._early.append(view)
        elif self.me in view.members:
            _say(f"* view {view.view_id}: {' '.join(view.members)}")

    def opened(self, me: str) -> None:
        self.me = me
        early, self._early = self._early, []
        for view in early:
            self.show(view)


async def _session(
    name: str, *, create: bool, registry_url: str, ordering: str | None, transport: str,
    node: str | None, options: OrderingOptions | None, timeout: float,
    secret: bytes | None = None,
) -> int:
    from abcast.registry.client import RegistryClient
    from abcast.runtime.group import Group

    views = _Views()
    kwargs: dict[str, Any] = {
        "registry": RegistryClient(registry_url, connect_timeout_s=timeout, secret=secret),
        "transport": transport, "node": node, "secret": secret,
        "on_deliver": _show_delivery, "on_view": views.show,
        "options": options, "join_timeout_s": timeout,
    }
    # No deadline of ours around these: the group's own (join_timeout_s, and the registry
    # client's) covers every step, and says which step it was (abcast.runtime.joining).
    if create:
        assert ordering is not None
        g = await Group.create(name, ordering=ordering, **kwargs)
    else:
        g = await Group.join(name, ordering=ordering, **kwargs)
    loop = asyncio.get_running_loop()
    stdin: _Stdin | None = None
    try:
        views.opened(g.node)
        stdin = _Stdin()
        for sig in (signal.SIGINT, signal.SIGTERM):
            # A signal is a /leave: the member says goodbye instead of vanishing.
            loop.add_signal_handler(sig, stdin.lines.put_nowait, "/leave")
        _say(f"{'created' if create else 'joined'} {name} as {g.node} "
             f"(ordering {g.ordering}); type lines to send, /leave to leave")
        # The group's end is awaited beside each line: removed, it went on without us.
        ended = asyncio.ensure_future(g.ended())
        getter: asyncio.Future[str | None] | None = None
        try:
            while True:
                getter = asyncio.ensure_future(stdin.lines.get())
                await asyncio.wait({getter, ended}, return_when=asyncio.FIRST_COMPLETED)
                if ended.done():
                    break  # (a line typed as it ended goes nowhere)
                line = getter.result()
                if line is None or line.strip() == "/leave":
                    break
                if line.strip() == "/members":
                    view = g.view
                    _say(f"* view {view.view_id}: {' '.join(view.members)} "
                         f"(leader {view.leader})")
                elif line:
                    await g.broadcast(line.encode())
        finally:
            ended.cancel()
            if getter is not None:
                getter.cancel()
        if not g.active and g.removed_view is not None:
            _say(f"* removed from {name}")
            return EXIT_REMOVED
        await g.leave()
        _say(f"left {name}")
        return 0
    except BaseException:
        # Ctrl-C, SIGTERM or a failure of the session itself: leave gracefully anyway
        # (the last member takes the group out of the registry), then let it go on.
        with contextlib.suppress(Exception):
            if g.active:
                await g.leave()
                _say(f"left {name}")
        raise
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        if stdin is not None:
            stdin.close()
        await g.close()


def _run(main: Any, registry_url: str | None = None) -> int:
    from abcast.runtime.loop import run_async

    try:
        code: int = run_async(main)
    except TimeoutError as exc:
        if str(exc):  # the runtime's own: what it waited for, and how long
            fail(f"timed out: {exc}")
        where = f" {registry_url}" if registry_url else ""
        fail(f"timed out waiting for the registry{where} (is the registry running there?)")
    except AbcastError as exc:
        fail(str(exc))
    return code


_node_option = click.option("--node", default=None, type=NAME,
                            help="Claim this node id (default: assigned).")
_transport_option = click.option(
    "--transport", default="tcp://127.0.0.1:0", show_default=True, type=TRANSPORT,
    help=transport_help("Address this node listens on (registered with the registry)"))


@group.command()
@name_argument
@registry_option
@click.option("--ordering", required=True, type=click.Choice(sorted(ORDERINGS)),
              help="The group's ordering (joiners use the same; every ordering "
                   "admits members at run time).")
@_transport_option
@_node_option
@ordering_options()
@timeout_option
@secret_option()
def create(name: str, registry_url: str, ordering: str, transport: str, node: str | None,
           flags: GroupFlags, timeout: float, secret_file: Path | None) -> None:
    """Create group NAME (this node its first member and leader) and open a session."""
    options = group_options(ordering, flags)
    sys.exit(_run(_session(name, create=True, registry_url=registry_url, ordering=ordering,
                           transport=transport, node=node,
                           options=None if options == OrderingOptions() else options,
                           timeout=timeout, secret=group_secret(secret_file)), registry_url))


@group.command()
@name_argument
@registry_option
@click.option("--ordering", default=None, type=click.Choice(sorted(ORDERINGS)),
              help="Only check that the group uses this ordering (the registry names it, "
                   "with the options its creator chose).")
@_transport_option
@_node_option
@timeout_option
@secret_option()
def join(name: str, registry_url: str, ordering: str | None, transport: str,
         node: str | None, timeout: float, secret_file: Path | None) -> None:
    """Join group NAME (found through the registry) and open a session."""
    sys.exit(_run(_session(name, create=False, registry_url=registry_url, ordering=ordering,
                           transport=transport, node=node, options=None, timeout=timeout,
                           secret=group_secret(secret_file)),
                  registry_url))


@group.command(name="list")
@registry_option
@click.option("--json", "as_json", is_flag=True, help="One JSON object per group.")
@timeout_option
def list_groups(registry_url: str, as_json: bool, timeout: float) -> None:
    """The groups the registry knows: name, ordering, view, leader, member count."""

    async def main() -> int:
        async with _client(registry_url, timeout) as client, asyncio.timeout(timeout):
            groups = await client.list_groups()
        for g in groups:
            if as_json:
                _say(json.dumps({"group": g.group, "ordering": g.ordering or None,
                                 "view_id": g.view_id, "leader": g.leader,
                                 "members": g.members}))
            else:
                _say(f"{g.group}  ordering={g.ordering or '-'}  view={g.view_id}  "
                     f"leader={g.leader or '-'}  members={g.members}")
        if not groups and not as_json:
            _say("no groups")
        return 0

    sys.exit(_run(main(), registry_url))


@group.command()
@name_argument
@registry_option
@click.option("--json", "as_json", is_flag=True, help="One JSON object.")
@timeout_option
def members(name: str, registry_url: str, as_json: bool, timeout: float) -> None:
    """The members of group NAME as its leader last registered them."""

    async def main() -> int:
        async with _client(registry_url, timeout) as client, asyncio.timeout(timeout):
            info = await client.lookup(name)
        if not info.members:
            return _error(f"the registry has no group {name!r}")
        if as_json:
            _say(json.dumps({"group": name, "ordering": info.ordering or None,
                             "view_id": info.view_id, "leader": info.leader,
                             "members": info.members}))
            return 0
        _say(f"{name}: ordering={info.ordering or '-'} view={info.view_id} "
             f"leader={info.leader}")
        for member, address in info.members.items():
            _say(f"  {member}  {address}")
        return 0

    sys.exit(_run(main(), registry_url))


@group.command()
@name_argument
@registry_option
@timeout_option
@secret_option()
def remove(name: str, registry_url: str, timeout: float, secret_file: Path | None) -> None:
    """Remove group NAME from the registry: nobody can join it any more and its leader
    stops registering it; running members go on until they leave. A secret group is
    removed only by a holder of its secret."""
    secret = group_secret(secret_file)

    async def main() -> int:
        async with _client(registry_url, timeout, secret) as client, asyncio.timeout(timeout):
            known = {g.group for g in await client.list_groups()}
            await client.remove(name)
        if name not in known:
            return _error(f"the registry has no group {name!r}")
        _say(f"removed {name}")
        return 0

    sys.exit(_run(main(), registry_url))


def _client(url: str, timeout: float, secret: bytes | None = None) -> Any:
    from abcast.registry.client import RegistryClient

    try:
        return RegistryClient(url, connect_timeout_s=timeout, secret=secret)
    except ConfigError as exc:
        fail(str(exc))
