"""`abcast serve` and `abcast call`: a replicated service and its client from a terminal.

Rules: `serve GROUP --kv|--echo` runs one server replica: it joins GROUP if the registry
knows it, else creates it with `--ordering`; it prints `serving …` and every view
(`* view <id>: <members>`) and runs until Ctrl-C/SIGTERM, then leaves gracefully.
`call GROUP PAYLOAD` makes one request and prints the consolidated value (or, with
`--json`, one JSON object: status, value, every reply with its server); exit 0 for OK,
1 for any other status or a voted reply that is the servers' error, 2 for bad arguments
or a registry that does not answer. `--oneway` prints `sent` once the request has left
this process (written to the connection: the transport holds none of it), or, when it
could not leave within `--timeout` (no server took the connection), `not sent` and exit 1.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sys
from typing import Any

import click

from abcast.apps.groups import _run, _say, registry_option, timeout_option
from abcast.cli_params import DURATION, NAME, TRANSPORT, transport_help
from abcast.ids import View
from abcast.ordering.registry import ORDERINGS
from abcast.rpc.client import CONTACTS, PATHS
from abcast.rpc.voting import CONSISTENCIES, Outcome


@click.command()
@click.argument("group", type=NAME)
@registry_option
@click.option("--kv", "service", flag_value="kv", default=True,
              help="A key-value store replica (put/get/incr/del/digest).")
@click.option("--echo", "service", flag_value="echo", help="Reply with the request.")
@click.option("--ordering", default="sequencer", show_default=True,
              type=click.Choice(sorted(n for n, s in ORDERINGS.items()
                                       if "total" in s.guarantees and "join" in s.tolerates)),
              help="The group's ordering, if this server creates it.")
@click.option("--transport", default="tcp://127.0.0.1:0", show_default=True, type=TRANSPORT,
              help=transport_help("Address to bind (advertised to the group through the "
                                  "registry)"))
@timeout_option
def serve(group: str, registry_url: str, service: str, ordering: str, transport: str,
          timeout: float) -> None:
    """Serve requests to GROUP as one replica (joins it, or creates it if new)."""
    sys.exit(_run(_serve(group, registry_url, service, ordering, transport, timeout),
                  registry_url))


async def _serve(group: str, registry_url: str, service: str, ordering: str,
                 transport: str, timeout: float) -> int:
    from abcast.registry.client import RegistryClient
    from abcast.rpc.server import Server
    from abcast.rpc.services import KeyValue, echo
    from abcast.runtime.group import Group

    registry = RegistryClient(registry_url, connect_timeout_s=timeout)
    info = await registry.lookup(group)  # ConfigError naming the registry past `timeout`
    exists = bool(info.members)
    kv = KeyValue()
    me: list[str] = []

    def show(view: View) -> None:
        if not me or me[0] in view.members:
            _say(f"* view {view.view_id}: {' '.join(view.members)}")

    server = (Server(kv, get_state=kv.get_state, set_state=kv.set_state, on_view=show)
              if service == "kv" else Server(echo, on_view=show))
    kwargs: dict[str, Any] = {"registry": registry, "transport": transport,
                              "join_timeout_s": timeout, **server.group_kwargs()}
    # the group's own deadline (join_timeout_s) says which step it waited for
    if exists:
        g = await Group.join(group, **kwargs)
    else:
        g = await Group.create(group, ordering=ordering, **kwargs)
    me.append(g.node)
    _say(f"serving {group} ({service}) as {g.node}, ordering {g.ordering}; Ctrl-C to leave")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        while g.active and not stop.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(0.2):
                    await stop.wait()
        if not g.active:
            _say(f"* removed from {group}")
            return 1
        await g.leave()
        _say(f"left {group}")
        return 0
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        server.close()
        await g.close()


@click.command()
@click.argument("group", type=NAME)
@click.argument("payload")
@registry_option
@click.option("--vote", default="majority", show_default=True,
              help="first | all | majority | quorum(k) | percent(p)")
@click.option("--consistency", default="any", show_default=True,
              type=click.Choice(CONSISTENCIES),
              help="What the counted replies must agree on (docs/rpc.md).")
@click.option("--timeout", "call_timeout", default="1s", show_default=True, type=DURATION,
              help="How long the request may wait (1s, 500ms); with --oneway, to leave.")
@click.option("--path", default="via-member", show_default=True, type=click.Choice(PATHS),
              help="direct: to every server (Case A); via-member: through one (Case B).")
@click.option("--contact", default="round-robin", show_default=True,
              type=click.Choice(CONTACTS),
              help="via-member: which server the request goes through.")
@click.option("--to", "to", default=None, help="Only these servers (comma-separated ids).")
@click.option("--oneway", is_flag=True, help="Send without waiting for a reply.")
@click.option("--json", "as_json", is_flag=True, help="Print the outcome as one JSON object.")
def call(group: str, payload: str, registry_url: str, vote: str, consistency: str,
         call_timeout: float, path: str, contact: str, to: str | None, oneway: bool,
         as_json: bool) -> None:
    """Send PAYLOAD as a request to GROUP's servers and print the voted reply."""
    targets = [t for t in (to or "").split(",") if t] or None
    sys.exit(_run(_call(group, payload.encode(), registry_url, vote=vote,
                        consistency=consistency, timeout=call_timeout, path=path,
                        contact=contact, to=targets, oneway=oneway, as_json=as_json),
                  registry_url))


async def _call(group: str, payload: bytes, registry_url: str, *, vote: str,
                consistency: str, timeout: float, path: str, contact: str,
                to: list[str] | None, oneway: bool, as_json: bool) -> int:
    from abcast.rpc.client import Client

    client = await Client.connect(group, registry=registry_url)
    try:
        if oneway:
            client.cast(payload, path=path, contact=contact, to=to)
            if not await client.flush(timeout):  # closing would discard what is queued
                why = f"not sent: no server took the request within {timeout:g} s"
                _say(json.dumps({"status": "NOT_SENT", "error": why}) if as_json else why)
                return 1
            _say(json.dumps({"status": "SENT"}) if as_json else "sent")
            return 0
        outcome = await client.request(payload, vote=vote, consistency=consistency,
                                       timeout=timeout, path=path, contact=contact, to=to)
    finally:
        await client.close()
    _say(json.dumps(outcome_json(outcome)) if as_json else _text(outcome))
    return 0 if outcome.ok and not outcome.failed else 1


def outcome_json(outcome: Outcome) -> dict[str, Any]:
    def text(value: bytes | None) -> str | None:
        return None if value is None else value.decode(errors="replace")

    return {"status": str(outcome.status), "value": text(outcome.value),
            "replies": [{"server": r.server, "ok": r.ok, "value": text(r.value)}
                        for r in outcome.replies]}


def _text(outcome: Outcome) -> str:
    value = (outcome.value or b"").decode(errors="replace")
    servers = ", ".join(f"{r.server}={r.value.decode(errors='replace')}"
                        + ("" if r.ok else " (error)") for r in outcome.replies)
    if outcome.ok and outcome.failed:
        return f"error: {value}    [{outcome.status}: {servers}]"
    if outcome.ok:
        return f"{value}    [{outcome.status}: {servers}]"
    return f"{outcome.status}    [{servers or 'no reply'}]"
