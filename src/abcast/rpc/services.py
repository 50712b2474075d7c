"""Ready services for `abcast serve`: an echo, and a key-value store replica.

Rules: a service is a deterministic function of the requests executed so far, in the
group's order, so equal orders make equal replicas. The key-value commands (payload
text, one space between words):

    put K V     → OK            get K      → V (empty if unset)
    incr K      → the new value (a decimal integer; unset counts as 0)
    del K       → OK            digest     → "<executed> <sha256 of the sorted items>"

Anything else is an error reply (`ValueError`), which costs the server nothing. The
state moves to a joiner as JSON (`get_state`/`set_state`).
"""

from __future__ import annotations

import hashlib
import json

from abcast.rpc.server import IncomingRequest


def echo(request: IncomingRequest) -> bytes:
    return request.payload


class KeyValue:
    def __init__(self) -> None:
        self.items: dict[str, str] = {}
        self.executed = 0

    def __call__(self, request: IncomingRequest) -> bytes:
        return self.apply(request.payload.decode(errors="replace"))

    def apply(self, command: str) -> bytes:
        self.executed += 1
        op, _, rest = command.strip().partition(" ")
        key, _, value = rest.partition(" ")
        if op == "put" and key:
            self.items[key] = value
            return b"OK"
        if op == "get" and key:
            return self.items.get(key, "").encode()
        if op == "incr" and key:
            current = self.items.get(key, "0")
            if not current.lstrip("-").isdigit():
                raise ValueError(f"{key} holds {current!r}, not an integer")
            self.items[key] = str(int(current) + 1)
            return self.items[key].encode()
        if op == "del" and key:
            self.items.pop(key, None)
            return b"OK"
        if op == "digest" and not key:
            return f"{self.executed} {self.digest()}".encode()
        raise ValueError(f"unknown command {command[:40]!r}; use put K V, get K, incr K, "
                         "del K or digest")

    def digest(self) -> str:
        return hashlib.sha256(json.dumps(sorted(self.items.items())).encode()).hexdigest()

    def get_state(self) -> bytes:
        return json.dumps({"items": self.items, "executed": self.executed}).encode()

    def set_state(self, state: bytes) -> None:
        if state:
            data = json.loads(state)
            self.items = dict(data["items"])
            self.executed = int(data["executed"])
