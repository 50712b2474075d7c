"""Link security, sans-IO: the group secret and its derived keys (secret.py), the
mutual challenge–response that opens every authenticated link (handshake.py), and the
per-frame MAC or AEAD with replay counters after it (sealing.py). Transports call it;
it knows nothing about sockets, time or where nonces come from (the caller passes them).
"""

from abcast.security.handshake import Initiator, Responder
from abcast.security.sealing import MODES, OVERHEAD, Mode, Opener, Sealer
from abcast.security.secret import load_secret, proof, same

__all__ = ["MODES", "OVERHEAD", "Initiator", "Mode", "Opener", "Responder", "Sealer",
           "load_secret", "proof", "same"]
