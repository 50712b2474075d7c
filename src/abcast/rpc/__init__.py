"""Requests and replies: clients that call a replicated group, servers that execute each
request once in the group's total order, and reply voting at the client.

`Client` (abcast.rpc.client), `Server` (abcast.rpc.server), `Vote`/`Ballot`/`Outcome`/
`Status` (abcast.rpc.voting, sans-IO), the wire (abcast.rpc.wire) and the at-most-once
table (abcast.rpc.executor). The page docs/rpc.md describes the model.
"""

from __future__ import annotations

from abcast.rpc.client import Client, call
from abcast.rpc.server import IncomingRequest, Server
from abcast.rpc.voting import Ballot, Outcome, Reply, Status, Vote

__all__ = ["Ballot", "Client", "IncomingRequest", "Outcome", "Reply", "Server", "Status",
           "Vote", "call"]
