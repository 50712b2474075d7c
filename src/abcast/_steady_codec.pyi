"""Types of the optional C extension abcast._steady_codec (src/abcast/_native/): the
steady subset of abcast's wire format. Not built everywhere: import it under a guard."""

from collections.abc import Sequence
from typing import Final

from _typeshed import ReadableBuffer

KIND_DATA: Final[int]
KIND_ORDER: Final[int]
SOURCE_HASH: Final[str]

#: (first, ((node, seq), ...)) of an SOrder
OrderBody = tuple[int, tuple[tuple[str, int], ...]]
#: (group, sender, flags, kind, rdata_seq, rdata_ack, SData's seq | OrderBody, payload)
Parsed = tuple[str, str, int, int, int, int, int | OrderBody, bytes]

def parse(frame: ReadableBuffer, /) -> Parsed | None: ...
def encode_data_frame(
    group: str, sender: str, rdata_seq: int, rdata_ack: int, seq: int,
    payload: ReadableBuffer, /,
) -> bytes: ...
def encode_order_frame(
    group: str, sender: str, rdata_seq: int, rdata_ack: int, first: int,
    ids: Sequence[tuple[str, int]], payload: ReadableBuffer, /,
) -> bytes: ...
