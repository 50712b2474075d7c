"""TLS contexts for the stream transports (tcps://, tcp://…?tls=1, grpc's own TLS reads
the same files), built once per transport from its options.

Rules: a listener needs `tls_cert`/`tls_key`; with `tls_ca` it also demands a client
certificate signed by that CA (mutual TLS). A dialler verifies the listener's
certificate against `tls_ca` (with hostname/IP check) or, without one, against the
system's CAs; it presents `tls_cert`/`tls_key` when given. TLS 1.2 at least. Files that
cannot be read are ConfigErrors naming the file.
"""

from __future__ import annotations

import ssl

from abcast.errors import ConfigError
from abcast.transport.base import TransportOptions


def _load_chain(ctx: ssl.SSLContext, options: TransportOptions) -> None:
    try:
        ctx.load_cert_chain(options.tls_cert, options.tls_key)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(
            f"cannot load TLS certificate {options.tls_cert!r} / key {options.tls_key!r}: {exc}"
        ) from None


def _load_ca(ctx: ssl.SSLContext, options: TransportOptions) -> None:
    try:
        ctx.load_verify_locations(options.tls_ca)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"cannot load TLS CA {options.tls_ca!r}: {exc}") from None


def server_context(options: TransportOptions) -> ssl.SSLContext:
    if not options.tls_cert:
        raise ConfigError("a TLS listener needs tls_cert and tls_key")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    _load_chain(ctx, options)
    if options.tls_ca:
        _load_ca(ctx, options)
        ctx.verify_mode = ssl.CERT_REQUIRED  # mutual TLS
    return ctx


def client_context(options: TransportOptions) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if options.tls_ca:
        _load_ca(ctx, options)
    else:
        ctx.load_default_certs()
    if options.tls_cert:
        _load_chain(ctx, options)
    return ctx


def read_pems(options: TransportOptions) -> tuple[bytes | None, bytes | None, bytes | None]:
    """(certificate, key, CA) as PEM bytes, for libraries that take bytes (grpc)."""

    def read(path: str, what: str) -> bytes | None:
        if not path:
            return None
        try:
            with open(path, "rb") as f:
                return f.read()
        except OSError as exc:
            raise ConfigError(f"cannot read TLS {what} {path!r}: {exc.strerror or exc}") from None

    return (read(options.tls_cert, "certificate"), read(options.tls_key, "key"),
            read(options.tls_ca, "CA"))
